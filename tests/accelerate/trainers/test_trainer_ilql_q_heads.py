"""``method.q_heads`` reaches the model the ILQL trainer trains: the embedding-read-out heads
are built and trained when asked, trlX's MLP heads otherwise."""

import pytest

import rlkit_core as rlkit

from walks_setup import run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


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


class Evaluations:
    def __init__(self):
        self.samples = []

    @rlkit.hookimpl
    def rlkit_evaluation_end(self, trainer, step, metrics, samples, is_main_process):
        self.samples.append((step, samples))


def test_every_beta_of_the_sweep_samples_from_the_same_random_numbers(tmp_path):
    """Untrained embedding heads leave sampling to the behaviour policy at any beta (Q flat), so
    with each sweep value drawn from the same random state the loop's evaluation gives the
    same samples at every beta; sampling is random (top_k 0), so one shared stream would not."""
    seen = Evaluations()
    gen = dict(max_new_tokens=6, top_k=0, beta=[0, 1, 16], temperature=1.0)
    run("ilql", tmp_path, plugins=[seen],
        config_overrides=dict(method=dict(q_heads="embedding", gen_kwargs=gen), train=dict(total_steps=1)))
    step, samples = seen.samples[0]
    assert step == 0
    by_beta = {b: [(r["prompt"], r["output"]) for r in samples if r["beta"] == b] for b in (0, 1, 16)}
    assert len(by_beta[0]) == 8 and by_beta[0] == by_beta[1] == by_beta[16]
    assert len({o for _, o in by_beta[0]}) > 1  # sampled, not one greedy answer
