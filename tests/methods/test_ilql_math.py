"""ILQL math against loop implementations; target sync; Q-guided logits."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit_methods import ILQLConfig
from rlkit_methods.ilql.losses import expectile_loss, ilql_loss
from rlkit_methods.ilql.sampling import q_guided_logits, sync_target, topk_mask
from rlkit_methods.ilql.store import ILQLBatch

FAST = settings(max_examples=30, deadline=None)


def log_softmax_list(xs):
    m = max(xs)
    z = math.log(sum(math.exp(x - m) for x in xs)) + m
    return [x - z for x in xs]


@st.composite
def ilql_inputs(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    B, A, V, n_q = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(2, 6)), draw(st.sampled_from([1, 2]))
    lengths = [draw(st.integers(1, A)) for _ in range(B)]
    dones = torch.tensor([[1] * n + [0] * (A + 1 - n) for n in lengths])  # (B, A + 1)
    rand = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    return dict(
        action_logits=rand(B, A, V), qs=[rand(B, A, V) for _ in range(n_q)], target_qs=[rand(B, A, V) for _ in range(n_q)],
        vs=rand(B, A + 1, 1), actions=torch.randint(0, V, (B, A), generator=g), rewards=rand(B, A), dones=dones,
    )


def ilql_loop(x, gamma, tau, cql_scale, awac_scale, beta):
    B, A, _ = x["action_logits"].shape
    lq = lv = lcql = lawac = 0.0
    n = 0
    for b in range(B):
        for t in range(A):
            if not x["dones"][b, t]:
                continue
            n += 1
            a = int(x["actions"][b, t])
            v = float(x["vs"][b, t, 0])
            v_next = float(x["vs"][b, t + 1, 0]) * float(x["dones"][b, t + 1])
            y = float(x["rewards"][b, t]) + gamma * v_next
            target = min(float(q[b, t, a]) for q in x["target_qs"])
            for q in x["qs"]:
                lq += (float(q[b, t, a]) - y) ** 2
                lcql += -log_softmax_list(q[b, t].tolist())[a]
            u = target - v
            lv += (tau if u >= 0 else 1 - tau) * u * u
            lawac += math.exp(beta * u) * -log_softmax_list(x["action_logits"][b, t].tolist())[a]
    n = max(n, 1)
    return (lq + lv + cql_scale * lcql + awac_scale * lawac) / n, lq / n, lv / n


@FAST
@given(ilql_inputs(), st.floats(0, 1), st.floats(0.01, 0.99), st.floats(0, 1), st.floats(0, 2), st.floats(0, 2))
def test_ilql_loss_matches_the_loop_definition(x, gamma, tau, cql_scale, awac_scale, beta):
    loss, stats = ilql_loss(**x, gamma=gamma, tau=tau, cql_scale=cql_scale, awac_scale=awac_scale, beta=beta)
    want, want_q, want_v = ilql_loop(x, gamma, tau, cql_scale, awac_scale, beta)
    assert loss.item() == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert stats["losses/loss_q"] == pytest.approx(want_q, rel=1e-4, abs=1e-4)
    assert stats["losses/loss_v"] == pytest.approx(want_v, rel=1e-4, abs=1e-4)


@FAST
@given(ilql_inputs(), st.integers(1, 3))
def test_padding_never_changes_the_ilql_loss(x, extra):
    """Extra padded actions (dones 0) holding garbage, and a fully padded row, change nothing."""
    B, A, V = x["action_logits"].shape

    def grow(t, fill_random=True):
        shape = list(t.shape)
        shape[1] = extra
        wide = torch.cat([t, torch.full(shape, 7, dtype=t.dtype) if fill_random else torch.zeros(shape, dtype=t.dtype)], 1)
        row = list(wide.shape)
        row[0] = 1
        return torch.cat([wide, torch.full(row, 3, dtype=t.dtype) if fill_random else torch.zeros(row, dtype=t.dtype)], 0)

    padded = {k: grow(v) for k, v in x.items() if k not in ("qs", "target_qs", "dones")}
    padded["qs"] = [grow(q) for q in x["qs"]]
    padded["target_qs"] = [grow(q) for q in x["target_qs"]]
    padded["dones"] = grow(x["dones"], fill_random=False)
    padded["actions"] = padded["actions"].clamp(max=V - 1)
    kw = dict(gamma=0.99, tau=0.7, cql_scale=0.1, awac_scale=1.0, beta=0.5)
    assert ilql_loss(**padded, **kw)[0].item() == pytest.approx(ilql_loss(**x, **kw)[0].item(), rel=1e-5, abs=1e-6)


def test_config_loss_keeps_trlx_contract():
    """ILQLConfig.loss((logits, (qs, target_qs, vs)), batch) gathers actions from input_ids."""
    torch.manual_seed(0)
    V = 5
    input_ids = torch.tensor([[1, 2, 3, 4, 0]])
    batch = ILQLBatch(input_ids=input_ids, attention_mask=torch.tensor([[1, 1, 1, 1, 0]]),
                      rewards=torch.tensor([[0.0, 0.5]]), states_ixs=torch.tensor([[1, 2, 3]]),
                      actions_ixs=torch.tensor([[1, 2]]), dones=torch.tensor([[1, 1, 0]]))
    logits = torch.randn(1, 5, V)
    qs = [torch.randn(1, 2, V), torch.randn(1, 2, V)]
    target_qs = [torch.randn(1, 2, V), torch.randn(1, 2, V)]
    vs = torch.randn(1, 3, 1)
    config = ILQLConfig()
    loss, stats = config.loss((logits, (qs, target_qs, vs)), batch)
    want, _ = ilql_loss(logits[:, [1, 2]], qs, target_qs, vs, torch.tensor([[3, 4]]), batch.rewards, batch.dones,
                        gamma=config.gamma, tau=config.tau, cql_scale=config.cql_scale,
                        awac_scale=config.awac_scale, beta=config.beta)
    assert loss.item() == pytest.approx(want.item())
    assert {"losses/loss", "losses/loss_q", "losses/loss_v", "losses/loss_cql", "losses/loss_awac"} <= set(stats)


def test_expectile_weights():
    diff = torch.tensor([2.0, -2.0, 0.0])
    torch.testing.assert_close(expectile_loss(diff, 0.7), torch.tensor([0.7 * 4, 0.3 * 4, 0.0]))


@pytest.mark.parametrize("alpha", [0.001, 0.25, 0.5, 1.0])
def test_target_sync_moves_target_by_alpha(alpha):
    q = [torch.ones(3, 2)]
    target = [torch.zeros(3, 2)]
    sync_target(target, q, alpha)
    torch.testing.assert_close(target[0], torch.full((3, 2), alpha))
    assert torch.equal(q[0], torch.ones(3, 2))


def test_target_sync_on_modules():
    head, target_head = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    with torch.no_grad():
        for p in head.parameters():
            p.fill_(1.0)
        for p in target_head.parameters():
            p.zero_()
    sync_target(target_head.parameters(), head.parameters(), 0.3)
    assert all(torch.allclose(p, torch.full_like(p, 0.3)) for p in target_head.parameters())


def test_target_sync_every_n_optimizer_steps():
    config = ILQLConfig(steps_for_target_q_sync=3)
    assert [s for s in range(0, 10) if config.should_sync_target(s)] == [3, 6, 9]


def q_guided_loop(logits, q, v, beta, top_k, temperature, forbidden):
    row = [(-math.inf if f else l) for l, f in zip(logits, forbidden)]
    finite = [x for x in row if x != -math.inf]
    m = max(finite)
    z = math.log(sum(math.exp(x - m) for x in finite)) + m
    adjusted = [(x - z) + beta * (qa - v) if x != -math.inf else -math.inf for x, qa in zip(row, q)]
    if 0 < top_k < len(adjusted):
        kth = sorted(adjusted, reverse=True)[top_k - 1]
        adjusted = [x if x >= kth else -math.inf for x in adjusted]
    return [x / temperature for x in adjusted]


@FAST
@given(st.integers(0, 2**31 - 1), st.integers(1, 3), st.integers(2, 8), st.floats(0, 5), st.integers(0, 9),
       st.floats(0.1, 2.0), st.booleans())
def test_q_guided_logits_match_the_loop_definition(seed, B, V, beta, top_k, temperature, use_mask):
    g = torch.Generator().manual_seed(seed)
    logits, qs, vs = torch.randn(B, V, generator=g), torch.randn(B, V, generator=g), torch.randn(B, generator=g)
    last = torch.randint(0, V, (B,), generator=g)
    logit_mask = torch.rand(V, V, generator=g) > 0.6
    logit_mask[:, 0] = False  # at least one token stays allowed
    out = q_guided_logits(logits, qs, vs, beta=beta, top_k=top_k, temperature=temperature,
                          logit_mask=logit_mask if use_mask else None, last_tokens=last)
    for b in range(B):
        forbidden = logit_mask[last[b]].tolist() if use_mask else [False] * V
        want = q_guided_loop(logits[b].tolist(), qs[b].tolist(), float(vs[b]), beta, top_k, temperature, forbidden)
        got = out[b].tolist()
        assert [x == -math.inf for x in got] == [x == -math.inf for x in want]
        np.testing.assert_allclose([x for x in got if x != -math.inf], [x for x in want if x != -math.inf], rtol=1e-4, atol=1e-4)


def test_topk_mask_keeps_k_largest():
    out = topk_mask(torch.tensor([[1.0, 5.0, 3.0, 4.0]]), 2)
    assert out.tolist() == [[-math.inf, 5.0, -math.inf, 4.0]]
    assert topk_mask(torch.tensor([[1.0, 2.0]]), 0).tolist() == [[1.0, 2.0]]


def test_behaviour_top_k_keeps_guidance_among_the_behaviour_policy_s_tokens():
    """A Q that favours a token the behaviour policy ranks last: trlX's rule (top-k after adding
    beta * (Q - V)) puts it first at large beta; behaviour_top_k never lets it in."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 12, generator=g)
    outsider = logits.argmin(dim=-1)  # (B,): least likely under pi_beta
    qs = torch.nn.functional.one_hot(outsider, 12).float() * 3.0
    vs = torch.zeros(4)
    trlx = q_guided_logits(logits, qs, vs, beta=100.0, top_k=3)
    assert torch.equal(trlx.argmax(dim=-1), outsider)
    kept = topk_mask(logits, 3) != -math.inf  # pi_beta's 3 most likely tokens
    for beta in (0.0, 1.0, 100.0, 1e6):
        out = q_guided_logits(logits, qs, vs, beta=beta, top_k=3, behaviour_top_k=3)
        assert torch.equal(out != -math.inf, kept)  # the same candidates at every beta
        assert (out.gather(1, outsider[:, None]) == -math.inf).all()
    # behaviour_top_k 0 is trlX's rule, bit for bit; at beta 0 both rules are pi_beta's top-k
    assert torch.equal(q_guided_logits(logits, qs, vs, beta=2.0, top_k=3, behaviour_top_k=0),
                       q_guided_logits(logits, qs, vs, beta=2.0, top_k=3))
    assert torch.equal(q_guided_logits(logits, qs, vs, beta=0.0, top_k=3, behaviour_top_k=3),
                       q_guided_logits(logits, qs, vs, beta=0.0, top_k=3))
    # within the kept tokens the guidance still reorders: a favoured kept token wins at large beta
    favoured = logits.topk(3, dim=-1).indices[:, -1]  # pi_beta's 3rd most likely
    qs2 = torch.nn.functional.one_hot(favoured, 12).float() * 3.0
    out = q_guided_logits(logits, qs2, vs, beta=100.0, top_k=3, behaviour_top_k=3)
    assert torch.equal(out.argmax(dim=-1), favoured)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="behaviour_top_k: must be an integer >= 0"):
            q_guided_logits(logits, qs, vs, behaviour_top_k=bad)
