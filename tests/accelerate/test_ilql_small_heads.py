"""``method.q_heads``: trlX's MLP heads by default (the same heads and losses as before the
option), or Q heads read out through the model's own output embedding, whose size does not
grow with the vocabulary."""

from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rlkit_accelerate.models.ilql_heads import CausalLMWithILQLHeads, ILQLHeads
from rlkit_accelerate.models.ilql_small_heads import EmbeddingILQLHeads, head_parameters, make_ilql_heads
from rlkit_methods.ilql.config import ILQLConfig

H, V = 16, 300


def base_model(seed=0):
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=H, n_head=2, vocab_size=V, n_positions=32, bos_token_id=0, eos_token_id=0,
                                      resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, V, (3, 7), generator=g)
    return SimpleNamespace(
        input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
        states_ixs=torch.arange(1, 7).repeat(3, 1), actions_ixs=torch.arange(1, 6).repeat(3, 1),
        rewards=torch.rand(3, 5, generator=g), dones=torch.tensor([[1, 1, 1, 1, 1, 0]] * 3),
    )


def loss_of(model, b, method=ILQLConfig(tau=0.8, cql_scale=0.1, beta=0.5)):
    out = model(b.input_ids, b.attention_mask, states_ixs=b.states_ixs, actions_ixs=b.actions_ixs)
    loss, _ = method.loss((out.logits, (out.qs, out.target_qs, out.vs)), b)
    return loss


def test_with_the_option_off_the_heads_and_losses_are_the_mlp_heads():
    b = batch()
    default = CausalLMWithILQLHeads(base_model(), two_qs=True, alpha=0.1)
    explicit = CausalLMWithILQLHeads(base_model(), two_qs=True, alpha=0.1, q_heads="mlp")
    # the heads as they were built before the option: ILQLHeads right after the base model
    before = base_model()
    old_heads = ILQLHeads(H, V, True, 0.1, before.lm_head.weight.dtype)
    assert isinstance(default.ilql_heads, ILQLHeads) and isinstance(explicit.ilql_heads, ILQLHeads)
    for model in (default, explicit):
        state = model.ilql_heads.state_dict()
        assert state.keys() == old_heads.state_dict().keys()
        assert all(torch.equal(state[k], old_heads.state_dict()[k]) for k in state)
    assert torch.equal(loss_of(default, b), loss_of(explicit, b))


def test_embedding_heads_are_small_and_use_the_models_own_output_embedding():
    model = CausalLMWithILQLHeads(base_model(), two_qs=True, alpha=0.1, q_heads="embedding")
    heads = model.ilql_heads
    assert isinstance(heads, EmbeddingILQLHeads)
    counts = head_parameters(heads)
    per_q = 4 * H * H + 5 * H + 1 + V  # h -> 2h -> h, the per-state offset 2h -> 1, the per-token bias
    assert counts["q"] == counts["target_q"] == 2 * per_q
    mlp = head_parameters(make_ilql_heads("mlp", H, model.layout.lm_head))
    assert mlp["q"] == 2 * (2 * H * H + 2 * H + 2 * H * V + V) and counts["q"] < mlp["q"] / 5
    lm_weight = model.layout.lm_head.weight
    assert all(p is not lm_weight for p in heads.parameters())  # the LM's weight is not the heads'

    b = batch()
    out = model(b.input_ids, b.attention_mask, states_ixs=b.states_ixs, actions_ixs=b.actions_ixs)
    assert out.qs[0].shape == (3, 5, V) and out.vs.shape == (3, 6, 1)
    # Q(s, a) = c(h_s) + E[a] . g(h_s) + b[a]
    head = heads.q_heads[0]
    with torch.no_grad():
        head.bias.normal_()
        head.features[2].weight.normal_()
    hidden = torch.randn(2, H)
    inner = head.features[1](head.features[0](hidden))
    expected = head.offset(inner) + head.features(hidden) @ lm_weight.T + head.bias
    torch.testing.assert_close(head(hidden), expected)

    # the Q loss does not move the output embedding through the Q heads' read-out
    model.zero_grad(set_to_none=True)
    head(torch.randn(2, H, requires_grad=True)).pow(2).sum().backward()
    assert lm_weight.grad is None
    assert head.features[0].weight.grad is not None and head.bias.grad is not None


def test_untrained_embedding_heads_leave_sampling_to_the_behaviour_policy():
    """The per-token part starts at zero: every token of a state has the same Q, so Q - V
    shifts all logits alike and Q-guided sampling at any beta is the behaviour policy (the
    per-state offset is trained from the start; trlX's random MLP heads add noise of std ~1
    to each token's logit, which large betas turned into line breaks and byte pieces)."""
    from rlkit_methods.ilql.sampling import q_guided_logits

    model = CausalLMWithILQLHeads(base_model(), two_qs=True, alpha=0.1, q_heads="embedding")
    b = batch()
    with torch.no_grad():
        out = model(b.input_ids, b.attention_mask, states_ixs=b.states_ixs, actions_ixs=b.actions_ixs)
    for q in out.qs + out.target_qs:
        assert torch.equal(q, q[..., :1].expand_as(q))  # flat over the vocabulary
    assert out.qs[0][..., 0].std() > 0  # but not the same for every state: c(h_s) is live
    logits, q, v = out.logits[:, -1], out.target_qs[0][:, -1], out.vs[:, -1]
    behaviour = q_guided_logits(logits, q, v, beta=0.0, top_k=0)
    for beta in (1.0, 16.0):
        guided = q_guided_logits(logits, q, v, beta=beta, top_k=0)
        torch.testing.assert_close(guided.log_softmax(-1), behaviour.log_softmax(-1))
    loss_of(model, b).backward()  # and the per-token part gets a gradient on the first step
    assert model.ilql_heads.q_heads[0].features[2].weight.grad.abs().sum() > 0


def test_embedding_heads_train_and_their_targets_sync():
    model = CausalLMWithILQLHeads(base_model(), two_qs=True, alpha=0.5, q_heads="embedding")
    b = batch()
    loss = loss_of(model, b)
    assert torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in model.ilql_heads.q_heads.parameters())
    assert all(p.grad is None for p in model.ilql_heads.target_q_heads.parameters())
    online, target = model.ilql_heads.q_heads[0].bias, model.ilql_heads.target_q_heads[0].bias
    with torch.no_grad():
        online.fill_(2.0)
        target.zero_()
    model.sync_target_q_heads()
    assert torch.allclose(target, torch.ones_like(target))  # 0.5 * 2 + 0.5 * 0
    samples = model.generate(b.input_ids[:, :2], beta=1.0, top_k=5, max_new_tokens=3)
    assert samples.shape[0] == 3 and samples.shape[1] <= 5


def test_unknown_head_kind_is_one_clear_error():
    with pytest.raises(ValueError, match="method.q_heads: unknown kind 'lowrank'; use one of mlp, embedding"):
        CausalLMWithILQLHeads(base_model(), q_heads="lowrank")
    from pathlib import Path

    from rlkit_core import load_config
    from rlkit_core.errors import ConfigError

    example = Path(__file__).resolve().parents[2] / "examples" / "randomwalks" / "ilql_randomwalks.yml"
    assert load_config(example).method.q_heads == "mlp"  # trlX's heads unless asked
    assert load_config(example, ["method.q_heads=embedding"]).method.q_heads == "embedding"
    with pytest.raises(ConfigError, match="q_heads"):
        load_config(example, ["method.q_heads=lowrank"])
