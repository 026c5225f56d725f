"""GRPO and RLOO math: hand-computed vectors (worked out in the comments, not by the
functions) and properties that must hold for any input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlkit_methods.grpo.losses import (
    aggregate,
    group_advantages,
    group_std,
    grpo_loss,
    k3_kl,
    rloo_advantages,
    rloo_kl_rewards,
    rloo_loss,
    scale_rewards_mode,
)

FAST = settings(max_examples=40, deadline=None)
LN = math.log


# --- advantages -------------------------------------------------------------------------------

def test_group_advantages_hand_computed():
    rewards = torch.tensor([1.0, 3.0, 2.0, 2.0])  # groups [1, 3] and [2, 2]
    # group: means 2, 2; unbiased stds sqrt(2), 0
    s = math.sqrt(2) + 1e-4
    torch.testing.assert_close(group_advantages(rewards, 2, "group"), torch.tensor([-1 / s, 1 / s, 0.0, 0.0]))
    torch.testing.assert_close(group_advantages(rewards, 2, True), torch.tensor([-1 / s, 1 / s, 0.0, 0.0]))
    # batch: unbiased std of [1, 3, 2, 2] = sqrt((1 + 1 + 0 + 0) / 3)
    b = math.sqrt(2 / 3) + 1e-4
    torch.testing.assert_close(group_advantages(rewards, 2, "batch"), torch.tensor([-1 / b, 1 / b, 0.0, 0.0]))
    # none (Dr. GRPO): the difference alone
    torch.testing.assert_close(group_advantages(rewards, 2, "none"), torch.tensor([-1.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(group_advantages(rewards, 2, False), torch.tensor([-1.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(group_std(rewards, 2), torch.tensor([math.sqrt(2)] * 2 + [0.0] * 2))


def test_rloo_advantages_hand_computed():
    rewards = torch.tensor([1.0, 2.0, 6.0])  # one group of 3, sum 9
    # baselines (9 - 1) / 2 = 4, (9 - 2) / 2 = 3.5, (9 - 6) / 2 = 1.5
    torch.testing.assert_close(rloo_advantages(rewards, 3), torch.tensor([-3.0, -1.5, 4.5]))
    # normalize: mean 0, unbiased std sqrt((9 + 2.25 + 20.25) / 2) = sqrt(15.75)
    s = math.sqrt(15.75) + 1e-4
    torch.testing.assert_close(rloo_advantages(rewards, 3, normalize=True), torch.tensor([-3 / s, -1.5 / s, 4.5 / s]))


def test_rloo_kl_penalty_on_the_reward_hand_computed():
    old = torch.tensor([[-1.0, -2.0, 7.0], [-0.5, -0.5, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # kl_0 = (-1 + 1.5) + (-2 + 1) = -0.5 (the padded column is ignored); kl_1 = 3 * 0.5 = 1.5
    rewards, kl = rloo_kl_rewards(torch.tensor([1.0, 2.0]), old, ref, mask, beta=0.1)
    torch.testing.assert_close(kl, torch.tensor([-0.5, 1.5]))
    torch.testing.assert_close(rewards, torch.tensor([1.05, 1.85]))


def test_bad_groups_and_modes_are_one_line_errors():
    with pytest.raises(ValueError, match="groups of num_generations=3"):
        group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="scale_rewards"):
        scale_rewards_mode("groups")
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(torch.zeros(4), 1)


@st.composite
def grouped_rewards(draw):
    G, P = draw(st.integers(2, 5)), draw(st.integers(1, 4))
    values = draw(hnp.arrays(np.float32, (P * G,), elements=st.floats(-5, 5, width=32)))
    return torch.tensor(values), G


@FAST
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]))
def test_advantages_sum_to_zero_in_every_group(data, mode):
    rewards, G = data
    # float32 as TRL computes them: the group mean's rounding (a few ulps of |r|) is divided by
    # std + 1e-4, so a group of equal rewards sums to ~G ulps / 1e-4, not to 0 (TRL's too)
    divisor = {"group": group_std(rewards, G) + 1e-4, "batch": rewards.std() + 1e-4, "none": torch.ones(())}[mode]
    rounding = G * 4 * torch.finfo(torch.float32).eps * rewards.abs().max() / divisor.min()
    for advantages in (group_advantages(rewards, G, mode), rloo_advantages(rewards, G)):
        sums = advantages.view(-1, G).sum(1)
        atol = 1e-3 * max(1.0, float(advantages.abs().max())) + float(rounding)
        assert torch.allclose(sums, torch.zeros_like(sums), atol=atol)


@FAST
@given(grouped_rewards())
def test_rloo_advantage_is_the_group_relative_one_scaled(data):
    """r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean_j r_j)."""
    rewards, G = data
    torch.testing.assert_close(rloo_advantages(rewards, G), G / (G - 1) * group_advantages(rewards, G, "none"),
                               atol=1e-4, rtol=1e-4)


# --- GRPO loss --------------------------------------------------------------------------------

def hand_batch():
    """Row 0: ratios 1.5, 0.9, A = 1. Row 1: ratio 0.5 then padding (garbage), A = -2."""
    old = torch.tensor([[-1.0, -2.0], [-1.0, -50.0]])
    logprobs = old + torch.tensor([[LN(1.5), LN(0.9)], [LN(0.5), 99.0]])
    ref = logprobs + torch.tensor([[0.0, LN(2.0)], [LN(0.5), -77.0]])  # ref - logprobs per token
    return logprobs, old, ref, torch.tensor([1.0, -2.0]), torch.tensor([[1, 1], [1, 0]])


def test_grpo_loss_hand_computed_for_each_loss_type():
    logprobs, old, ref, A, mask = hand_batch()
    # eps_low 0.2, eps_high 0.28: per-token -min(rho A, clip(rho) A)
    #   row 0: rho 1.5 -> clip 1.28 -> -1.28;  rho 0.9 -> -0.9
    #   row 1: rho 0.5, A = -2 -> min(-1.0, 0.8 * -2 = -1.6) = -1.6 -> +1.6
    # sum over tokens: -1.28 - 0.9 + 1.6 = -0.58 over 3 tokens, 2 rows
    want = {
        "grpo": ((-1.28 - 0.9) / 2 + 1.6) / 2,  # 0.255
        "bnpo": -0.58 / 3,
        "dr_grpo": -0.58 / (2 * 4),  # max_completion_length 4
        "dapo": -0.58 / (2 * 2.9),  # 2.9 loss tokens per sample over the generation batch
    }
    for loss_type, value in want.items():
        loss, stats = grpo_loss(logprobs, old, None, A, mask, beta=0.0, epsilon=0.2, epsilon_high=0.28,
                                loss_type=loss_type, max_completion_length=4, tokens_per_sequence=2.9)
        assert loss.item() == pytest.approx(value, rel=1e-5), loss_type
        assert stats["losses/policy_loss"] == pytest.approx(value, rel=1e-5)
    # clipped: row 1 low (rho < 0.8 and A < 0), row 0's first token high (rho > 1.28 and A > 0)
    assert stats["clip_ratio/low_mean"] == pytest.approx(1 / 3)
    assert stats["clip_ratio/high_mean"] == pytest.approx(1 / 3)
    assert stats["policy/clipfrac"] == pytest.approx(2 / 3)
    assert stats["ratio"] == pytest.approx((1.5 + 0.9 + 0.5) / 3, rel=1e-5)
    assert stats["padding_percentage"] == pytest.approx(0.25)


def test_grpo_loss_k3_kl_term_hand_computed():
    logprobs, old, ref, A, mask = hand_batch()
    # k3 = e^d - d - 1 with d = ref - logprobs: d = 0 -> 0; d = ln 2 -> 1 - ln 2; d = ln 0.5 -> ln 2 - 0.5
    kl = [0.0, 1 - LN(2), LN(2) - 0.5]  # sum 0.5
    loss, stats = grpo_loss(logprobs, old, ref, A, mask, beta=0.1, epsilon=0.2, epsilon_high=0.28, loss_type="bnpo",
                            bias_correction_kl=False)
    assert loss.item() == pytest.approx((-0.58 + 0.1 * sum(kl)) / 3, rel=1e-5)
    assert stats["losses/policy_loss"] == pytest.approx(-0.58 / 3, rel=1e-5)
    assert stats["policy/kl"] == pytest.approx(sum(kl) / 3, rel=1e-5)
    # TRL's default use_bias_correction_kl: each token's k3 times its ratio rho (1.5, 0.9, 0.5)
    corrected = [0.0 * 1.5, (1 - LN(2)) * 0.9, (LN(2) - 0.5) * 0.5]
    loss, stats = grpo_loss(logprobs, old, ref, A, mask, beta=0.1, epsilon=0.2, epsilon_high=0.28, loss_type="bnpo")
    assert loss.item() == pytest.approx((-0.58 + 0.1 * sum(corrected)) / 3, rel=1e-5)
    assert stats["policy/kl"] == pytest.approx(sum(corrected) / 3, rel=1e-5)
    torch.testing.assert_close(k3_kl(torch.tensor([0.0, 0.0]), torch.tensor([LN(2), LN(0.5)])),
                               torch.tensor([1 - LN(2), LN(2) - 0.5]))


def test_bias_corrected_kl_changes_the_gradient_not_the_value_when_pi_old_is_the_policy():
    # one token, A = 0 (no policy gradient), log pi = 0, pi_old = pi detached, log pi_ref = ln 2:
    # d = ln 2, k3 = 1 - ln 2, dk3/dlog pi = 1 - e^d = -1; with rho (= 1, drho/dlog pi = 1): k3 - 1 = -ln 2
    grads = {}
    for correct in (True, False):
        logprobs = torch.zeros(1, 1, requires_grad=True)
        loss, _ = grpo_loss(logprobs, logprobs.detach(), torch.tensor([[LN(2)]]), torch.zeros(1), torch.ones(1, 1),
                            beta=1.0, epsilon=0.2, loss_type="bnpo", bias_correction_kl=correct)
        assert loss.item() == pytest.approx(1 - LN(2))
        loss.backward()
        grads[correct] = logprobs.grad.item()
    assert grads == {True: pytest.approx(-LN(2)), False: pytest.approx(-1.0)}


def test_grpo_loss_needs_a_reference_when_beta_is_set_and_a_length_for_dr_grpo():
    logprobs, old, _, A, mask = hand_batch()
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(logprobs, old, None, A, mask, beta=0.1, epsilon=0.2)
    with pytest.raises(ValueError, match="max_completion_length"):
        grpo_loss(logprobs, old, None, A, mask, beta=0.0, epsilon=0.2, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(logprobs, old, None, A, mask, beta=0.0, epsilon=0.2, loss_type="cispo")


@st.composite
def batches(draw, max_b=5, max_t=6):
    B, T = draw(st.integers(1, max_b)), draw(st.integers(1, max_t))
    floats = st.floats(-2, 2, allow_nan=False, width=32)
    arr = lambda shape: torch.tensor(draw(hnp.arrays(np.float32, shape, elements=floats)))  # noqa: E731
    lengths = [draw(st.integers(1, T)) for _ in range(B)]
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    old = arr((B, T)) - 3
    return dict(logprobs=old + 0.3 * arr((B, T)), old_logprobs=old, ref_logprobs=old + arr((B, T)),
                advantages=arr((B,)), mask=mask)


LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]


@FAST
@given(batches(), st.sampled_from(LOSS_TYPES))
def test_ratio_one_gives_minus_the_advantage_mean(b, loss_type):
    """pi == pi_old and beta = 0: every token's loss is -A_i, aggregated by the loss type."""
    mask, A = b["mask"], b["advantages"]
    loss, _ = grpo_loss(b["old_logprobs"], b["old_logprobs"], None, A, mask, beta=0.0, epsilon=0.2,
                        loss_type=loss_type, max_completion_length=7)
    n = mask.sum(1)
    want = {"grpo": -A.mean(), "bnpo": -(A * n).sum() / n.sum(), "dapo": -(A * n).sum() / n.sum(),
            "dr_grpo": -(A * n).sum() / (len(A) * 7)}[loss_type]
    assert loss.item() == pytest.approx(want.item(), rel=1e-4, abs=1e-5)


@FAST
@given(batches(), st.sampled_from(LOSS_TYPES), st.floats(0.05, 0.4), st.floats(0.05, 0.5))
def test_clipped_tokens_get_no_gradient_and_others_do(b, loss_type, eps, eps_high):
    logprobs = b["logprobs"].clone().requires_grad_(True)
    loss, _ = grpo_loss(logprobs, b["old_logprobs"], None, b["advantages"], b["mask"], beta=0.0, epsilon=eps,
                        epsilon_high=eps_high, loss_type=loss_type, max_completion_length=6)
    loss.backward()
    ratio = torch.exp(b["logprobs"] - b["old_logprobs"])
    A = b["advantages"].unsqueeze(1).expand_as(ratio)
    def beyond(margin):  # the clipped side of each bound, ``margin`` away from it
        return ((ratio > 1 + eps_high + margin) & (A > 0)) | ((ratio < 1 - eps - margin) & (A < 0))

    clipped = beyond(1e-4)
    live = ~beyond(-1e-4) & (A.abs() > 1e-3) & b["mask"].bool()
    assert (logprobs.grad[clipped] == 0).all()
    assert (logprobs.grad[~b["mask"].bool()] == 0).all()
    assert (logprobs.grad[live] != 0).all()


@FAST
@given(batches(), st.sampled_from(LOSS_TYPES), st.floats(-40, 40))
def test_beta_zero_never_reads_the_reference(b, loss_type, garbage):
    args = (b["logprobs"], b["old_logprobs"])
    kw = dict(beta=0.0, epsilon=0.2, loss_type=loss_type, max_completion_length=6)
    none, _ = grpo_loss(*args, None, b["advantages"], b["mask"], **kw)
    junk, _ = grpo_loss(*args, torch.full_like(b["logprobs"], garbage), b["advantages"], b["mask"], **kw)
    assert none.item() == junk.item()


@FAST
@given(batches(), st.sampled_from(LOSS_TYPES), st.integers(1, 3), st.floats(-50, 50))
def test_padding_never_changes_the_grpo_loss(b, loss_type, extra, garbage):
    def padded(x):
        return torch.cat([x, torch.full((x.shape[0], extra), 0.0 if x is b["mask"] else garbage)], 1)

    kw = dict(beta=0.05, epsilon=0.2, epsilon_high=0.3, loss_type=loss_type, max_completion_length=6, tokens_per_sequence=2.5)
    keys = ("logprobs", "old_logprobs", "ref_logprobs")
    base, base_stats = grpo_loss(*(b[k] for k in keys), b["advantages"], b["mask"], **kw)
    pad, pad_stats = grpo_loss(*(padded(b[k]) for k in keys), b["advantages"], padded(b["mask"]), **kw)
    assert pad.item() == pytest.approx(base.item(), rel=1e-5, abs=1e-6)
    assert pad_stats["policy/kl"] == pytest.approx(base_stats["policy/kl"], rel=1e-5, abs=1e-6)


@FAST
@given(batches(max_b=6), st.integers(1, 3))
def test_dapo_over_micro_batches_is_the_global_token_mean(b, split):
    """Micro-batches weighted by their share of rows (what an engine's step does), each
    normalised by tokens_per_sequence of the whole batch, sum to bnpo on the whole batch."""
    mask = b["mask"]
    B = mask.shape[0]
    tokens_per_sequence = mask.sum().item() / B
    whole, _ = grpo_loss(b["logprobs"], b["old_logprobs"], None, b["advantages"], mask, beta=0.0, epsilon=0.2, loss_type="bnpo")
    total = 0.0
    for rows in torch.arange(B).tensor_split(min(split, B)):
        part, _ = grpo_loss(b["logprobs"][rows], b["old_logprobs"][rows], None, b["advantages"][rows], mask[rows],
                            beta=0.0, epsilon=0.2, loss_type="dapo", tokens_per_sequence=tokens_per_sequence)
        total += part.item() * len(rows) / B
    assert total == pytest.approx(whole.item(), rel=1e-4, abs=1e-5)


@FAST
@given(batches())
def test_k3_is_never_negative_and_zero_at_the_reference(b):
    kl = k3_kl(b["logprobs"], b["ref_logprobs"])
    assert (kl >= -1e-6).all()
    assert (k3_kl(b["logprobs"], b["logprobs"]) == 0).all()


def test_aggregate_rejects_unknown_types():
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "sum")


# --- RLOO loss --------------------------------------------------------------------------------

def test_rloo_loss_hand_computed():
    # row 0: sum log pi - sum log pi_old = ln 1.5 -> rho 1.5, A = 1 -> clip 1.2 -> -1.2
    # row 1: rho 0.5 (the padded token ignored), A = -2 -> min(-1.0, -1.6) = -1.6 -> +1.6
    old = torch.tensor([[-1.0, -1.0], [-2.0, 30.0]])
    logprobs = old + torch.tensor([[LN(3.0), LN(0.5)], [LN(0.5), -40.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, stats = rloo_loss(logprobs, old, torch.tensor([1.0, -2.0]), mask, epsilon=0.2)
    assert loss.item() == pytest.approx((-1.2 + 1.6) / 2, rel=1e-5)
    assert stats["clip_ratio/high_mean"] == pytest.approx(0.5)
    assert stats["clip_ratio/low_mean"] == pytest.approx(0.5)
    assert stats["ratio"] == pytest.approx(1.0, rel=1e-5)
    # epsilon_high 0.6 leaves rho 1.5 unclipped: -1.5
    loss, _ = rloo_loss(logprobs, old, torch.tensor([1.0, -2.0]), mask, epsilon=0.2, epsilon_high=0.6)
    assert loss.item() == pytest.approx((-1.5 + 1.6) / 2, rel=1e-5)


@FAST
@given(batches())
def test_rloo_loss_at_ratio_one_is_minus_the_mean_advantage(b):
    loss, _ = rloo_loss(b["old_logprobs"], b["old_logprobs"], b["advantages"], b["mask"], epsilon=0.2)
    assert loss.item() == pytest.approx(-b["advantages"].mean().item(), rel=1e-5, abs=1e-6)
