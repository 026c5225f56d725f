"""PPO math: hand-computed vectors, loop implementations, padding invariance."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlkit_methods import AdaptiveKLController, FixedKLController, PPOConfig
from rlkit_methods.common.stats import RunningMoments, masked_moments, whiten
from rlkit_methods.ppo.losses import (
    approx_kl_k3,
    clip_scores,
    gae_advantages_and_returns,
    kl_penalty_rewards,
    ppo_loss,
    scale_scores,
)
from rlkit_methods.ppo.store import PPORLElement, PPORolloutStorage, response_mask

FAST = settings(max_examples=40, deadline=None)


def test_gae_hand_computed_vector():
    values = torch.tensor([[1.0, 2.0, 3.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    advantages, returns = gae_advantages_and_returns(values, rewards, gamma=0.9, lam=0.5)
    torch.testing.assert_close(advantages, torch.tensor([[0.71, -0.2, -2.0]]))
    torch.testing.assert_close(returns, torch.tensor([[1.71, 1.8, 1.0]]))
    # trlX's method on the config: returns before whitening, whitened advantages
    config = PPOConfig(gamma=0.9, lam=0.5)
    adv_w, ret = config.get_advantages_and_returns(values, rewards, 3, use_whitening=True)
    torch.testing.assert_close(ret, torch.tensor([[1.71, 1.8, 1.0]]))
    raw = torch.tensor([0.71, -0.2, -2.0])
    torch.testing.assert_close(adv_w[0], (raw - raw.mean()) / torch.sqrt(raw.var(unbiased=False) + 1e-8))


def test_adaptive_kl_controller_hand_computed():
    controller = AdaptiveKLController(0.1, target=6, horizon=10000)
    controller.update(12, n_steps=256)
    assert controller.value == pytest.approx(0.100512, abs=1e-12)
    controller = AdaptiveKLController(0.1, target=6, horizon=10000)
    controller.update(3, n_steps=256)  # error clipped at -0.2
    assert controller.value == pytest.approx(0.1 * (1 - 0.2 * 256 / 10000))


def test_fixed_kl_controller_never_changes():
    controller = FixedKLController(0.05)
    for current in (0.0, 1e6, -3.0):
        controller.update(current, n_steps=1000)
    assert controller.value == 0.05


def gae_loop(values, rewards, gamma, lam):
    T = len(values)
    adv = [0.0] * T
    for t in range(T):
        total = 0.0
        for k in range(t, T):
            next_v = values[k + 1] if k + 1 < T else 0.0
            delta = rewards[k] + gamma * next_v - values[k]
            total += (gamma * lam) ** (k - t) * delta
        adv[t] = total
    return adv, [a + v for a, v in zip(adv, values)]


@st.composite
def rollouts(draw, max_b=4, max_t=6):
    B, T = draw(st.integers(1, max_b)), draw(st.integers(1, max_t))
    floats = st.floats(-3, 3, allow_nan=False, width=32)
    arr = lambda: torch.tensor(draw(hnp.arrays(np.float32, (B, T), elements=floats)))  # noqa: E731
    lengths = [draw(st.integers(1, T)) for _ in range(B)]
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    return dict(logprobs=arr() - 3, values=arr(), old_logprobs=arr() - 3, old_values=arr(),
                advantages=arr(), returns=arr(), rewards=arr(), mask=mask)


@FAST
@given(rollouts(), st.floats(0, 1), st.floats(0, 1))
def test_gae_matches_the_loop_definition(r, gamma, lam):
    adv, ret = gae_advantages_and_returns(r["values"], r["rewards"], gamma, lam, r["mask"])
    for b in range(r["mask"].shape[0]):
        n = int(r["mask"][b].sum())
        want_adv, want_ret = gae_loop(r["values"][b, :n].tolist(), r["rewards"][b, :n].tolist(), gamma, lam)
        np.testing.assert_allclose(adv[b, :n].numpy(), want_adv, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ret[b, :n].numpy(), want_ret, rtol=1e-4, atol=1e-4)
        assert (adv[b, n:] == 0).all() and (ret[b, n:] == 0).all()


def ppo_loss_loop(r, cliprange, cliprange_value, vf_coef):
    pg, vf, n = 0.0, 0.0, 0
    B, T = r["mask"].shape
    for b in range(B):
        for t in range(T):
            if not r["mask"][b, t]:
                continue
            n += 1
            lp, olp, a = (float(r[k][b, t]) for k in ("logprobs", "old_logprobs", "advantages"))
            v, ov, R = (float(r[k][b, t]) for k in ("values", "old_values", "returns"))
            ratio = math.exp(lp - olp)
            pg += max(-a * ratio, -a * min(max(ratio, 1 - cliprange), 1 + cliprange))
            v_clip = min(max(v, ov - cliprange_value), ov + cliprange_value)
            vf += 0.5 * max((v - R) ** 2, (v_clip - R) ** 2)
    return pg / n + vf_coef * vf / n, pg / n, vf / n


@FAST
@given(rollouts(), st.floats(0.05, 0.5), st.floats(0.05, 2.0), st.floats(0, 2))
def test_ppo_loss_matches_the_loop_definition(r, cliprange, cliprange_value, vf_coef):
    config = PPOConfig(cliprange=cliprange, cliprange_value=cliprange_value, vf_coef=vf_coef)
    keys = ("logprobs", "values", "old_logprobs", "old_values", "advantages", "returns", "mask")
    loss, stats = config.loss(**{k: r[k] for k in keys})
    want, want_pg, want_vf = ppo_loss_loop(r, cliprange, cliprange_value, vf_coef)
    assert loss.item() == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert stats["losses/policy_loss"] == pytest.approx(want_pg, rel=1e-4, abs=1e-4)
    assert stats["losses/value_loss"] == pytest.approx(want_vf, rel=1e-4, abs=1e-4)


@FAST
@given(rollouts(), st.integers(1, 3), st.floats(-50, 50))
def test_padding_never_changes_the_ppo_loss_or_gae(r, extra, garbage):
    """Columns and rows of padding holding any values change nothing."""
    def padded(x, fill):
        B, T = x.shape
        wide = torch.cat([x, torch.full((B, extra), fill)], 1)
        return torch.cat([wide, torch.full((1, T + extra), fill)], 0)

    p = {k: padded(v, 0.0 if k == "mask" else garbage) for k, v in r.items()}
    keys = ("logprobs", "values", "old_logprobs", "old_values", "advantages", "returns", "mask")
    base, base_stats = ppo_loss(**{k: r[k] for k in keys}, cliprange=0.2, cliprange_value=0.2, vf_coef=1.0)
    pad, pad_stats = ppo_loss(**{k: p[k] for k in keys}, cliprange=0.2, cliprange_value=0.2, vf_coef=1.0)
    assert pad.item() == pytest.approx(base.item(), rel=1e-5, abs=1e-6)
    assert pad_stats["policy/approx_kl"] == pytest.approx(base_stats["policy/approx_kl"], rel=1e-5, abs=1e-6)
    a0, r0 = gae_advantages_and_returns(r["values"], r["rewards"], 0.99, 0.95, r["mask"])
    a1, r1 = gae_advantages_and_returns(p["values"], p["rewards"], 0.99, 0.95, p["mask"])
    B, T = r["mask"].shape
    torch.testing.assert_close(a1[:B, :T], a0)
    torch.testing.assert_close(r1[:B, :T], r0)
    torch.testing.assert_close(whiten(a1, p["mask"])[:B, :T], whiten(a0, r["mask"]))


def test_k3_kl_estimate():
    log_ratio = torch.tensor([[0.5, -0.5, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    want = sum(math.exp(x) - 1 - x for x in (0.5, -0.5)) / 2
    assert approx_kl_k3(log_ratio, mask).item() == pytest.approx(want)


def test_whitening_is_one_definition_population_moments():
    xs = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    mean, var, count = masked_moments(xs, mask)
    assert (mean.item(), var.item(), count.item()) == pytest.approx((2.0, 2 / 3, 3))
    out = whiten(xs, mask)
    assert out[0, 3] == 0
    assert out[0, :3].mean().item() == pytest.approx(0, abs=1e-6)


def test_running_moments_equal_moments_of_everything_seen():
    torch.manual_seed(0)
    batches = [torch.randn(5) * 3 + 1, torch.randn(7) - 2, torch.randn(3)]
    moments = RunningMoments()
    for batch in batches:
        mean, std = moments.update(batch)
        assert mean == pytest.approx(batch.mean().item(), rel=1e-5)
        assert std == pytest.approx(batch.std().item(), rel=1e-5)
    everything = torch.cat(batches)
    assert moments.mean == pytest.approx(everything.mean().item(), rel=1e-5)
    assert moments.std == pytest.approx(everything.std().item(), rel=1e-5)


def test_score_goes_on_the_last_generated_token_inside_the_mask():
    eos = pad = 2  # the pad token is the EOS token, as with GPT-2
    responses = torch.tensor([[5, 6, eos, pad], [7, eos, pad, pad], [8, 9, 10, 11]])
    mask = response_mask(responses, eos)
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    logprobs = torch.full((3, 4), -1.0)
    ref_logprobs = torch.full((3, 4), -1.5)
    rewards, kl = kl_penalty_rewards(logprobs, ref_logprobs, mask, 0.1, torch.tensor([1.0, 2.0, 3.0]))
    per_token = -0.1 * 0.5
    want = [[per_token, per_token, per_token + 1.0, 0.0],
            [per_token, per_token + 2.0, 0.0, 0.0],
            [per_token, per_token, per_token, per_token + 3.0]]
    torch.testing.assert_close(rewards, torch.tensor(want))
    last = mask.sum(1) - 1
    assert all(mask[i, last[i]] == 1 and rewards[i, last[i]] > 0.5 for i in range(3))
    torch.testing.assert_close(kl, (math.exp(0.5) - 1.5) * mask.sum(1).float())


def test_dense_scores_are_added_per_token():
    mask = torch.tensor([[1, 1, 1, 0]])
    zeros = torch.zeros(1, 4)
    rewards, _ = kl_penalty_rewards(zeros, zeros, mask, 0.1, torch.tensor([[0.5, -0.5, 0.0, 9.0]]))
    torch.testing.assert_close(rewards, torch.tensor([[0.5, -0.5, 0.0, 0.0]]))


def test_empty_response_is_an_error():
    with pytest.raises(ValueError, match="rollout 1: empty response"):
        kl_penalty_rewards(torch.zeros(2, 2), torch.zeros(2, 2), torch.tensor([[1, 0], [0, 0]]), 0.1, torch.ones(2))


def test_reward_scaling_and_clipping():
    scores = torch.tensor([-20.0, 1.0, 4.0])
    torch.testing.assert_close(clip_scores(scores, 10), torch.tensor([-10.0, 1.0, 4.0]))
    assert clip_scores(scores, 0) is scores
    torch.testing.assert_close(scale_scores(scores, "running", running_std=2.0), scores / 2)
    torch.testing.assert_close(scale_scores(scores, "ref", ref_std=4.0), scores / 4)
    torch.testing.assert_close(scale_scores(scores, "ref", ref_std=0.0), scores)  # no division by 0
    assert scale_scores(scores, "ignored") is scores
    assert scale_scores(scores, "whiten").mean().item() == pytest.approx(0, abs=1e-6)


def test_rollout_collate_left_pads_prompts_and_positions_follow_real_tokens():
    store = PPORolloutStorage(pad_token_id=0, padding_side="left")
    store.push([
        PPORLElement(torch.tensor([5, 6, 7]), torch.tensor([8, 2]), torch.zeros(2), torch.zeros(2), torch.zeros(2)),
        PPORLElement(torch.tensor([0, 9]), torch.tensor([3, 4, 2]), torch.zeros(3), torch.zeros(3), torch.ones(3),
                     query_mask=torch.tensor([0, 1])),
    ])
    batch = next(iter(store.create_loader(2)))
    assert batch.query_tensors.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert batch.response_tensors.tolist() == [[8, 2, 0], [3, 4, 2]]
    assert batch.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert batch.rewards.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_rollout_with_mismatched_lengths_is_an_error():
    store = PPORolloutStorage(pad_token_id=0)
    store.push([PPORLElement(torch.tensor([5]), torch.tensor([8, 2]), torch.zeros(1), torch.zeros(2), torch.zeros(2))])
    with pytest.raises(ValueError, match="rollout 0: response has 2 tokens but 1 logprobs"):
        next(iter(store.create_loader(1)))


def test_export_history_writes_json(tmp_path):
    store = PPORolloutStorage(pad_token_id=0)
    store.push([PPORLElement(torch.tensor([5]), torch.tensor([2]), torch.zeros(1), torch.zeros(1), torch.ones(1))])
    import json

    data = json.loads(open(store.export_history(str(tmp_path))).read())
    assert data[0]["rewards"] == [1.0] and data[0]["query_tensor"] == [5]
