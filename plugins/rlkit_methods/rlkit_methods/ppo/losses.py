"""PPO math as pure functions (Schulman et al. 2017; Ziegler et al. 2019 for the KL reward).

Shapes: B = batch of rollouts, T = response tokens (right-padded); ``mask`` is 1 on real
response tokens (the last generated token, EOS included, is real) and 0 on padding. Every
function multiplies by ``mask`` before reducing, so padding never changes a result.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from rlkit_methods.common.kl import k1, k3
from rlkit_methods.common.offpolicy import truncated_importance_weights, weight_stats
from rlkit_methods.common.stats import AllReduce, flatten_dict, masked_mean, tensor_stats, whiten


def gae_advantages_and_returns(
    values: torch.Tensor,
    rewards: torch.Tensor,
    gamma: float,
    lam: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016), before any whitening::

        delta_t = r_t + gamma * V_{t+1} - V_t          (V_T = 0 after the last token)
        A_t     = delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t

    Returns ``(advantages, returns)``, each (B, T), zero on padding.
    """
    if mask is not None:
        m = mask.to(values.dtype)
        values, rewards = values * m, rewards * m  # padding bootstraps 0 and adds 0
    T = values.shape[1]
    lastgaelam = torch.zeros_like(values[:, 0])  # (B,)
    advantages_reversed = []
    for t in reversed(range(T)):
        nextvalues = values[:, t + 1] if t < T - 1 else torch.zeros_like(values[:, t])  # (B,)
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]  # (B,)
        lastgaelam = delta + gamma * lam * lastgaelam  # (B,)
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)  # (B, T)
    returns = advantages + values  # (B, T)
    if mask is not None:
        advantages, returns = advantages * m, returns * m
    return advantages, returns


def phase_advantages_and_returns(
    values: Sequence[torch.Tensor],
    rewards: Sequence[torch.Tensor],
    gamma: float,
    lam: float,
    *,
    all_reduce: AllReduce = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """GAE for every rollout of a phase, advantages whitened over all of the phase's
    response tokens (every rank's, given ``all_reduce``, the engine's sum over ranks)::

        A, R = gae_advantages_and_returns(V, r)      per rollout
        A    <- (A - mean(A)) / sqrt(var(A) + 1e-8)  over the phase (returns stay unwhitened)

    Once per phase, before any step: the update then uses the same advantages however an
    engine splits a step into micro-batches. ``values`` and ``rewards``: one (R_i,) tensor per
    rollout; returns one (R_i,) advantages and one returns tensor per rollout."""
    lengths = [int(v.shape[0]) for v in values]
    if not lengths:  # no rollouts here: still take part in the other ranks' sums
        empty = torch.zeros(0, 0)
        whiten(empty, empty, all_reduce=all_reduce)
        return [], []
    V = torch.nn.utils.rnn.pad_sequence(list(values), batch_first=True).float()  # (N, T)
    r = torch.nn.utils.rnn.pad_sequence(list(rewards), batch_first=True).float()  # (N, T)
    mask = (torch.arange(V.shape[1]).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()  # (N, T)
    advantages, returns = gae_advantages_and_returns(V, r, gamma, lam, mask)
    advantages = whiten(advantages, mask, all_reduce=all_reduce)  # (N, T)
    return [a[:n] for a, n in zip(advantages, lengths)], [g[:n] for g, n in zip(returns, lengths)]


def approx_kl_k3(log_ratio: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """trlX's ``approx_kl``: the masked mean of (r - 1) - log r, r = p/q (k3 of
    :mod:`rlkit_methods.common.kl` with the ratio inverted)."""
    return masked_mean(k3(-log_ratio), mask)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
    importance_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate objective, as a loss to minimise::

        rho_t = exp(log pi(a_t|s_t) - log pi_old(a_t|s_t))
        L_pg  = sum_t m_t * w_t * max(-A_t * rho_t, -A_t * clip(rho_t, 1 - eps, 1 + eps)) / sum_t m_t

    ``w_t`` (B, T): the truncated importance weight of a sampler other than pi_old
    (:mod:`rlkit_methods.common.offpolicy`); 1 when None.
    """
    m = mask.to(logprobs.dtype)
    n = m.sum().clamp(min=1)
    log_ratio = (logprobs - old_logprobs) * m  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    per_token = torch.max(pg_loss1, pg_loss2)  # (B, T)
    if importance_weights is not None:
        per_token = per_token * importance_weights.to(per_token.dtype)
    pg_loss = torch.sum(per_token * m) / n
    with torch.no_grad():
        stats = {
            "clipfrac": torch.sum((pg_loss2 > pg_loss1).to(m.dtype) * m) / n,
            "approx_kl": approx_kl_k3(log_ratio, m),
            "ratio": torch.sum(ratio * m) / n,
        }
    return pg_loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss::

        V_clip = clip(V, V_old - eps_v, V_old + eps_v)
        L_vf   = 0.5 * sum_t m_t * max((V_t - R_t)^2, (V_clip_t - R_t)^2) / sum_t m_t
    """
    m = mask.to(values.dtype)
    n = m.sum().clamp(min=1)
    values_clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    vf_loss1 = (values - returns) ** 2  # (B, T)
    vf_loss2 = (values_clipped - returns) ** 2  # (B, T)
    vf_loss = 0.5 * torch.sum(torch.max(vf_loss1, vf_loss2) * m) / n
    with torch.no_grad():
        stats = {
            "clipfrac": torch.sum((vf_loss2 > vf_loss1).to(m.dtype) * m) / n,
            "values_error": torch.sum(((values - returns) * m) ** 2) / n,
        }
    return vf_loss, stats


def ppo_loss(
    logprobs: torch.Tensor,
    values: torch.Tensor,
    old_logprobs: torch.Tensor,
    old_values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    cliprange: float,
    cliprange_value: float,
    vf_coef: float,
    sampler_logprobs: torch.Tensor | None = None,
    importance_sampling_cap: float = 3.0,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """L = L_pg + vf_coef * L_vf; returns ``(loss, stats)`` with trlX's metric names.

    ``sampler_logprobs`` (B, T): the generator's log-probs of the sampled tokens, given when the
    policy-gradient term is corrected for the sampler (``w_t = min(exp(log pi_old - log mu), C)``
    with C ``importance_sampling_cap``, :mod:`rlkit_methods.common.offpolicy`); the value loss is not."""
    weights = None
    if sampler_logprobs is not None:
        weights = truncated_importance_weights(old_logprobs, sampler_logprobs, mask, importance_sampling_cap)  # (B, T)
    pg_loss, pg_stats = policy_loss(logprobs, old_logprobs, advantages, mask, cliprange, weights)
    vf_loss, vf_stats = value_loss(values, old_values, returns, mask, cliprange_value)
    loss = pg_loss + vf_coef * vf_loss
    n = mask.sum().clamp(min=1)
    stats = {
        "losses": {"total_loss": loss.item(), "policy_loss": pg_loss.item(), "value_loss": vf_loss.item()},
        "values": {**tensor_stats(values.detach(), mask, n), **vf_stats},
        "old_values": tensor_stats(old_values, mask, n),
        "returns": tensor_stats(returns, mask, n),
        "policy": {"approx_kl": pg_stats["approx_kl"], "clipfrac": pg_stats["clipfrac"]},
        "ratio": pg_stats["ratio"],
        "padding_percentage": 1 - n / mask.numel(),
    }
    if weights is not None:
        stats.update(weight_stats(weights, mask))
    return loss, flatten_dict(stats)


def kl_penalty_rewards(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    scores: torch.Tensor,
    scores_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards: a KL penalty on every token plus the reward model's score::

        r_t = -beta * (log pi(a_t|s_t) - log pi_ref(a_t|s_t))    + score on the last token

    ``scores`` is (B,) — one score, added on the last real response token, which is inside
    the loss mask — or (B, S) dense per-token scores (``scores_mask`` marks the given ones),
    added from the first response token on. Returns ``(rewards (B, T), kl (B,))`` where
    ``kl`` is the k3 estimate summed over each response (what the KL controller tracks).
    """
    m = mask.to(logprobs.dtype)
    lengths = mask.sum(1).long()  # (B,)
    if (lengths == 0).any():
        empty = int(torch.nonzero(lengths == 0)[0])
        raise ValueError(f"rollout {empty}: empty response (no generated token); keep the EOS token in the mask")
    log_ratio = (logprobs - ref_logprobs) * m  # (B, T)
    kl = (k3(-log_ratio) * m).sum(1)  # (B,)
    rewards = -kl_coef * k1(log_ratio)  # (B, T)
    scores = scores.to(rewards.dtype)
    if scores.dim() == 1:
        last = (lengths - 1).unsqueeze(1)  # (B, 1)
        rewards = rewards.scatter_add(1, last, scores.unsqueeze(1))
    else:
        dense = torch.zeros_like(rewards)
        width = min(scores.shape[1], rewards.shape[1])
        sm = torch.ones_like(scores) if scores_mask is None else scores_mask.to(scores.dtype)
        dense[:, :width] = (scores * sm)[:, :width]
        rewards = rewards + dense * m
    return rewards * m, kl


def clip_scores(scores: torch.Tensor, cliprange_reward: float | None) -> torch.Tensor:
    """clip(score, -c, c); off when ``cliprange_reward`` is 0 or None (trlX's rule)."""
    if not cliprange_reward:
        return scores
    return torch.clamp(scores, -cliprange_reward, cliprange_reward)


def scale_scores(
    scores: torch.Tensor,
    scale_reward: str | None,
    *,
    running_std: float | None = None,
    ref_std: float | None = None,
    mask: torch.Tensor | None = None,
    all_reduce=None,
) -> torch.Tensor:
    """Reward scaling: ``running`` divides by the running std of all scores so far, ``ref``
    by the std of the first rollout batch (or ``method.ref_std``), ``whiten`` whitens the
    batch (over data-parallel ranks with ``all_reduce``); ``None``/``ignored`` leaves scores
    unchanged. A zero std leaves scores unscaled."""
    if scale_reward in (None, "ignored"):
        return scores
    if scale_reward == "whiten":
        return whiten(scores, mask, all_reduce=all_reduce)
    std = {"running": running_std, "ref": ref_std}.get(scale_reward)
    if scale_reward not in ("running", "ref"):
        raise ValueError(f"scale_reward: must be one of None, 'ignored', 'running', 'ref', 'whiten', got {scale_reward!r}")
    if std is None:
        raise ValueError(f"scale_reward={scale_reward!r} needs a {scale_reward} std; none was given")
    std = float(std)
    return scores / std if std > 0 else scores
