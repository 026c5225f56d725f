"""``method.q_heads`` reaches the model the ILQL trainer trains: the embedding-read-out heads
are built and trained when asked, trlX's MLP heads otherwise."""

import pytest

from walks_setup import run


@pytest.mark.parametrize("q_heads", ["mlp", "embedding"])
def test_the_configured_q_heads_are_trained(q_heads, tmp_path):
    trainer = run("ilql", tmp_path, config_overrides=dict(method=dict(q_heads=q_heads), train=dict(total_steps=2)))
    heads = trainer.unwrapped_model.ilql_heads
    vocab = trainer.unwrapped_model.layout.lm_head.weight.shape[0]
    n_q = sum(p.numel() for p in heads.q_heads.parameters())
    assert trainer.iter_count == 2
    if q_heads == "mlp":
        assert n_q > 2 * vocab * 32  # a |V|-wide output layer per head
    else:
        assert n_q == 2 * (4 * 32 * 32 + 5 * 32 + 1 + vocab)  # 4h^2 + 5h + 1 + |V| per head, h = 32
