"""The truncated importance-sampling correction of PPO, GRPO and RLOO (issue 27): the weight
min(exp(log pi_old - log mu), C) on the policy-gradient term, exactly 1 where the generator's
log-probs are the trainer's, capped at C, off by default."""

import math

import pytest
import torch

from rlkit_methods.common.offpolicy import truncated_importance_weights, truncated_sequence_weights
from rlkit_methods.grpo.config import GRPOConfig, RLOOConfig
from rlkit_methods.grpo.losses import grpo_loss, rloo_loss
from rlkit_methods.ppo.config import PPOConfig
from rlkit_methods.ppo.losses import ppo_loss

MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def logprobs(seed):
    return -torch.rand(2, 4, generator=torch.Generator().manual_seed(seed)) * 3


def ppo(logp, old, sampler=None, cap=3.0):
    values = torch.zeros(2, 4, requires_grad=True)
    advantages = torch.tensor([[1.0, -2.0, 0.5, 9.0], [-1.0, 3.0, 9.0, 9.0]])
    return ppo_loss(logp, values, old, torch.zeros(2, 4), advantages, torch.zeros(2, 4), MASK, cliprange=0.2,
                    cliprange_value=0.2, vf_coef=1.0, sampler_logprobs=sampler, importance_sampling_cap=cap)


def test_the_weight_is_exactly_one_where_the_generator_is_the_trainer():
    old = logprobs(0)
    assert torch.equal(truncated_importance_weights(old, old.clone(), MASK, 3.0), torch.ones(2, 4))
    assert torch.equal(truncated_sequence_weights(old, old.clone(), MASK, 3.0), torch.ones(2))
    logp = (old + 0.05 * logprobs(1)).requires_grad_()
    plain, _ = ppo(logp, old)
    weighted, stats = ppo(logp, old, sampler=old.clone())
    assert torch.equal(plain, weighted)
    assert stats["sampling/importance_sampling_ratio/min"] == stats["sampling/importance_sampling_ratio/max"] == 1.0
    g_plain, = torch.autograd.grad(plain, logp)
    g_weighted, = torch.autograd.grad(ppo(logp, old, sampler=old.clone())[0], logp)
    assert torch.equal(g_plain, g_weighted)


def test_the_weight_is_capped_and_padding_weighs_one():
    old = torch.zeros(2, 4)
    sampler = torch.tensor([[-math.log(10.0), -0.5, 0.5, -9.0], [-2.0, 0.0, -9.0, -9.0]])  # mu far below pi_old on some
    w = truncated_importance_weights(old, sampler, MASK, 3.0)
    expected = torch.tensor([[3.0, math.exp(0.5), math.exp(-0.5), 1.0], [3.0, 1.0, 1.0, 1.0]])
    assert torch.allclose(w, expected) and w.max() == 3.0
    # a sequence: exp(sum over its real tokens), capped
    seq = truncated_sequence_weights(old, torch.tensor([[-0.1, -0.2, 0.1, -9.0], [-9.0, 0.0, 0.0, 0.0]]), MASK, 3.0)
    assert torch.allclose(seq, torch.tensor([math.exp(0.2), 3.0]))


def test_ppo_policy_loss_is_weighted_as_the_formula_says():
    # ratio 1 (pi = pi_old): each real token's clipped surrogate is -A_t, times w_t, over 5 tokens
    old = torch.zeros(2, 4)
    sampler = torch.tensor([[-0.5, -2.0, 0.3, 0.0], [-1.5, 0.2, 0.0, 0.0]])
    logp = old.clone().requires_grad_()
    loss, stats = ppo(logp, old, sampler=sampler, cap=3.0)
    w = [math.exp(0.5), 3.0, math.exp(-0.3), 3.0, math.exp(-0.2)]  # exp(2) and exp(1.5) capped at 3
    A = [1.0, -2.0, 0.5, -1.0, 3.0]
    expected = sum(-a * wt for a, wt in zip(A, w)) / 5
    assert stats["losses/policy_loss"] == pytest.approx(expected, rel=1e-6)
    assert stats["losses/value_loss"] == 0.0  # the value loss is not weighted
    grad, = torch.autograd.grad(loss, logp)  # d/dlogp of -A w rho at rho = 1: -A w / n
    assert torch.allclose(grad[MASK.bool()], torch.tensor([-a * wt / 5 for a, wt in zip(A, w)]))


def test_grpo_weights_the_policy_term_and_not_the_kl():
    old = torch.zeros(1, 3)
    logp = old.clone().requires_grad_()
    ref = torch.full((1, 3), -0.3)
    sampler = torch.tensor([[-2.0, 0.0, 1.0]])
    mask = torch.ones(1, 3)
    common = dict(beta=0.1, epsilon=0.2, loss_type="bnpo", bias_correction_kl=False)
    plain, plain_stats = grpo_loss(logp, old, ref, torch.tensor([2.0]), mask, **common)
    weighted, stats = grpo_loss(logp, old, ref, torch.tensor([2.0]), mask, sampler_logprobs=sampler,
                                importance_sampling_cap=3.0, **common)
    w = torch.tensor([3.0, 1.0, math.exp(-1.0)])
    kl = plain_stats["policy/kl"]  # the same KL term both times
    assert stats["policy/kl"] == kl
    assert weighted.item() == pytest.approx((-2.0 * w).mean().item() + 0.1 * kl, rel=1e-6)
    assert plain.item() == pytest.approx(-2.0 + 0.1 * kl, rel=1e-6)


def test_rloo_weights_each_sequence_by_its_capped_ratio():
    old = torch.zeros(2, 2)
    logp = old.clone().requires_grad_()
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    sampler = torch.tensor([[-0.2, -0.1], [-5.0, 7.0]])  # the second row's padding is not counted
    loss, stats = rloo_loss(logp, old, torch.tensor([1.0, -1.0]), mask, epsilon=0.2, sampler_logprobs=sampler,
                            importance_sampling_cap=3.0)
    assert loss.item() == pytest.approx((-1.0 * math.exp(0.3) + 1.0 * 3.0) / 2, rel=1e-6)
    assert stats["sampling/importance_sampling_ratio/max"] == 3.0


@pytest.mark.parametrize("config", [PPOConfig, GRPOConfig, RLOOConfig])
def test_the_correction_is_off_by_default_and_its_cap_is_checked(config):
    assert config().vllm_importance_sampling_correction is False
    assert config().vllm_importance_sampling_clip_max == 3.0  # TRL 1.16's default C
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_max"):
        config(vllm_importance_sampling_clip_max=0.0)
