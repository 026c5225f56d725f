"""GRPO and RLOO math as pure functions, with TRL 1.16's semantics.

GRPO: Shao et al. 2024 (DeepSeekMath); loss normalisations of Dr. GRPO (Liu et al. 2025) and
DAPO (Yu et al. 2025). RLOO: Ahmadian et al. 2024, in TRL 1.16's shape (sequence-level
clipped ratio, the KL to the reference as a reward penalty).

Shapes: N = every sample of a generation batch, G = ``num_generations`` (samples of one prompt
are G consecutive rows), B = rows of a micro-batch, T = response tokens (right-padded).
``mask`` is 1 on the tokens that count (real response tokens; none of a truncated sample
when ``mask_truncated_completions``) and 0 elsewhere; padding never changes a result.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from rlkit_methods.common.kl import k1, k3
from rlkit_methods.common.offpolicy import truncated_importance_weights, truncated_sequence_weights, weight_stats

# the config's choices (grpo/config.py); this module needs only torch, so bench/ can load it by file
SCALE_REWARDS = ("group", "batch", "none")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
STD_EPS = 1e-4  # TRL's: advantages / (std + 1e-4)


def scale_rewards_mode(scale_rewards: str | bool) -> str:
    """TRL's spelling: True is ``"group"``, False is ``"none"``."""
    mode = ("group" if scale_rewards else "none") if isinstance(scale_rewards, bool) else scale_rewards
    if mode not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards: must be one of group, batch, none (or true/false), got {scale_rewards!r}")
    return mode


def _groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """(N,) -> (N / G, G), each row one prompt's samples."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards: expected one reward per sample (N,), got shape {tuple(rewards.shape)}")
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(f"rewards: {rewards.numel()} samples do not split into groups of num_generations={num_generations}")
    return rewards.view(-1, num_generations)


def group_std(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """The unbiased standard deviation of each sample's group, (N,) (0 for groups of one)."""
    grouped = _groups(rewards.float(), num_generations)  # (N/G, G)
    if num_generations == 1:
        return torch.zeros_like(rewards, dtype=grouped.dtype)
    return grouped.std(dim=1).repeat_interleave(num_generations)  # (N,)


def batch_moments(x: torch.Tensor, all_reduce: Callable | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased std) of ``x`` (N,), over every rank's entries with ``all_reduce`` (the
    engine's sum over data-parallel ranks); std 0 for fewer than 2 entries."""
    x = x.double()
    sums = torch.stack([x.sum(), (x * x).sum(), torch.tensor(float(x.numel()), dtype=torch.float64)])  # (3,)
    if all_reduce is not None:
        sums = all_reduce(sums)
    total, squares, n = sums.tolist()
    mean = total / max(n, 1)
    var = max(squares - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
    return torch.tensor(mean), torch.tensor(var**0.5)


def group_advantages(rewards: torch.Tensor, num_generations: int, scale_rewards: str | bool = "group",
                     *, all_reduce: Callable | None = None) -> torch.Tensor:
    """GRPO's group-relative advantages, one per sample::

        A_i = (r_i - mean_{j in g(i)} r_j) / (std + 1e-4)

    where ``std`` is the unbiased standard deviation of the sample's group for ``"group"``
    (or True), of the whole batch for ``"batch"``; ``"none"`` (or False) leaves the
    difference unscaled (Dr. GRPO). Each group's advantages sum to 0 before scaling. Groups
    never span ranks; the ``"batch"`` std covers every rank's rewards given ``all_reduce``.
    """
    mode = scale_rewards_mode(scale_rewards)
    rewards = rewards.float()
    grouped = _groups(rewards, num_generations)  # (N/G, G)
    advantages = rewards - grouped.mean(dim=1).repeat_interleave(num_generations)  # (N,)
    if mode == "group":
        advantages = advantages / (group_std(rewards, num_generations) + STD_EPS)
    elif mode == "batch":
        advantages = advantages / (batch_moments(rewards, all_reduce)[1].float() + STD_EPS)
    return advantages


def rloo_advantages(rewards: torch.Tensor, num_generations: int, normalize: bool = False,
                    *, all_reduce: Callable | None = None) -> torch.Tensor:
    """RLOO's leave-one-out advantages, one per sample::

        A_i = r_i - (sum_{j in g(i)} r_j - r_i) / (G - 1)

    With ``normalize`` (TRL's ``normalize_advantages``) the batch's advantages are then
    whitened: ``(A - mean(A)) / (std(A) + 1e-4)`` (unbiased std, over every rank's
    advantages given ``all_reduce``).
    """
    if num_generations < 2:
        raise ValueError(f"num_generations: RLOO's leave-one-out baseline needs at least 2 samples per prompt, got {num_generations}")
    rewards = rewards.float()
    grouped = _groups(rewards, num_generations)  # (N/G, G)
    baselines = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)  # (N/G, G)
    advantages = rewards - baselines.reshape(-1)  # (N,)
    if normalize:
        mean, std = batch_moments(advantages, all_reduce)
        advantages = (advantages - mean.float()) / (std.float() + STD_EPS)
    return advantages


def rloo_kl_rewards(
    rewards: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO's KL penalty, on the reward (first-order log ratio, summed over the sequence)::

        kl_i = sum_t m_t (log pi_old(a_t|s_t) - log pi_ref(a_t|s_t))
        r_i <- r_i - beta * kl_i

    Returns ``(rewards (N,), kl (N,))``.
    """
    m = mask.to(old_logprobs.dtype)
    kl = torch.where(m.bool(), k1(old_logprobs - ref_logprobs), torch.zeros_like(old_logprobs)).sum(dim=1)  # (N,)
    return rewards.float() - beta * kl, kl


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(pi || pi_ref) per token, always >= 0::

        kl_t = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1
    """
    return k3(logprobs - ref_logprobs)  # (B, T)


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum() / m.sum().clamp(min=1)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, *, max_completion_length: int | None = None,
              tokens_per_sequence: float | None = None) -> torch.Tensor:
    """One micro-batch's loss from per-token losses ``l`` (B, T), as TRL 1.16 normalises it::

        grpo     mean_i ( sum_t m_it l_it / sum_t m_it )
        bnpo     sum_it m_it l_it / sum_it m_it
        dr_grpo  sum_it m_it l_it / (B * max_completion_length)
        dapo     sum_it m_it l_it / (B * tokens_per_sequence)

    ``tokens_per_sequence`` is the mean count of loss tokens per sample over the whole
    generation batch (every rank): TRL's ``num_items_in_batch`` spread over the micro-batches,
    so the optimizer step's loss is the global token mean however the batch is split. Without
    it ``dapo`` uses this micro-batch's own tokens (the same as ``bnpo``; TRL's value when one
    micro-batch on one process holds the whole generation batch). The engine weighs each
    micro-batch by its share of the step's rows (B / rows per step), as TRL divides by the
    gradient accumulation steps.
    """
    m = mask.to(per_token.dtype)
    total = (per_token * m).sum()
    if loss_type == "grpo":
        return ((per_token * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return total / m.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        if not max_completion_length:
            raise ValueError("loss_type dr_grpo: needs max_completion_length (gen_kwargs.max_new_tokens)")
        return total / (per_token.shape[0] * max_completion_length)
    if loss_type == "dapo":
        if tokens_per_sequence is None:
            return total / m.sum().clamp(min=1)
        return total / (per_token.shape[0] * max(float(tokens_per_sequence), 1e-8))
    raise ValueError(f"loss_type: must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float,
    epsilon: float,
    epsilon_high: float | None = None,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
    tokens_per_sequence: float | None = None,
    bias_correction_kl: bool = True,
    sampler_logprobs: torch.Tensor | None = None,
    importance_sampling_cap: float = 3.0,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """GRPO's clipped surrogate with a per-token KL to the reference, as a loss to minimise::

        rho_t = exp(log pi(a_t|s_t) - log pi_old(a_t|s_t))
        w_t   = min(exp(log pi_old - log mu), C)     (given ``sampler_logprobs`` log mu; else 1)
        l_t   = -w_t min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta kl_t
        kl_t  = rho_t (exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1)   (k3; beta > 0 only)
        L     = aggregate(l, mask, loss_type)                              (see ``aggregate``)

    ``advantages`` is (B,) (one per sample) or (B, T). ``eps_low = epsilon``, ``eps_high =
    epsilon_high`` (``epsilon`` when None). With ``beta == 0`` the reference is never read
    (``ref_logprobs`` may be None). The factor rho_t on the KL is TRL 1.16's default
    ``use_bias_correction_kl`` (DeepSeek-V3.2: the unbiased reverse-KL gradient; its value is 1
    when pi_old is the policy itself, its gradient is not); ``bias_correction_kl=False`` drops
    it. ``w_t`` is the truncated importance weight of the generator ``mu`` against pi_old
    (:mod:`rlkit_methods.common.offpolicy`; C ``importance_sampling_cap``), on the
    policy-gradient term only, as TRL 1.16 applies it. Returns ``(loss, stats)``.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    m = mask.to(logprobs.dtype)
    keep = m.bool()
    A = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    A = A.to(logprobs.dtype)
    log_ratio = torch.where(keep, logprobs - old_logprobs, torch.zeros_like(logprobs))  # (B, T), 0 on padding
    ratio = torch.exp(log_ratio)  # (B, T)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    policy = -torch.min(ratio * A, clipped * A)  # (B, T)
    weights = None
    if sampler_logprobs is not None:
        weights = truncated_importance_weights(old_logprobs, sampler_logprobs, mask, importance_sampling_cap)  # (B, T)
        policy = policy * weights
    per_token = policy
    kl = None
    if beta != 0:
        if ref_logprobs is None:
            raise ValueError(f"grpo_loss: beta={beta} needs ref_logprobs (the reference's log-probs)")
        kl = k3_kl(logprobs, torch.where(keep, ref_logprobs, logprobs))  # (B, T), 0 on padding
        if bias_correction_kl:
            kl = kl * ratio  # (B, T), TRL's use_bias_correction_kl
        per_token = policy + beta * kl
    norm = dict(max_completion_length=max_completion_length, tokens_per_sequence=tokens_per_sequence)
    loss = aggregate(per_token, m, loss_type, **norm)
    with torch.no_grad():
        low = (ratio < 1 - epsilon) & (A < 0)
        high = (ratio > 1 + eps_high) & (A > 0)
        stats = {
            "losses/total_loss": loss.item(),
            "losses/policy_loss": aggregate(policy.detach(), m, loss_type, **norm).item(),
            "policy/approx_kl": _masked_mean(k3(-log_ratio), m).item(),
            "policy/clipfrac": _masked_mean((low | high).to(m.dtype), m).item(),
            "clip_ratio/low_mean": _masked_mean(low.to(m.dtype), m).item(),
            "clip_ratio/high_mean": _masked_mean(high.to(m.dtype), m).item(),
            "ratio": _masked_mean(ratio, m).item(),
            "padding_percentage": 1 - m.sum().item() / max(m.numel(), 1),
        }
        if kl is not None:
            stats["policy/kl"] = _masked_mean(kl, m).item()
        if weights is not None:
            stats.update(weight_stats(weights, mask))
    return loss, stats


def rloo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon: float,
    epsilon_high: float | None = None,
    sampler_logprobs: torch.Tensor | None = None,
    importance_sampling_cap: float = 3.0,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """RLOO's clipped surrogate on the sequence's probability ratio (TRL 1.16)::

        rho_i = exp(sum_t m_t log pi(a_t|s_t) - sum_t m_t log pi_old(a_t|s_t))
        w_i   = min(exp(sum_t m_t (log pi_old - log mu)), C)   (given ``sampler_logprobs``; else 1)
        L     = mean_i -w_i min(rho_i A_i, clip(rho_i, 1 - eps_low, 1 + eps_high) A_i)

    The ratio is the sequence's, so the generator's correction is too (TRL's
    ``sequence_truncate``; :mod:`rlkit_methods.common.offpolicy`). The KL to the reference is in
    the rewards (:func:`rloo_kl_rewards`), not here.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    keep = mask.bool()
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(keep, logprobs, zero).sum(dim=1) - torch.where(keep, old_logprobs, zero).sum(dim=1)  # (B,)
    ratio = torch.exp(log_ratio)  # (B,)
    A = advantages.to(logprobs.dtype)  # (B,)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_sample = -torch.min(ratio * A, clipped * A)  # (B,)
    weights = None
    if sampler_logprobs is not None:
        weights = truncated_sequence_weights(old_logprobs, sampler_logprobs, mask, importance_sampling_cap)  # (B,)
        per_sample = per_sample * weights
    loss = per_sample.mean()
    with torch.no_grad():
        low = (ratio < 1 - epsilon) & (A < 0)
        high = (ratio > 1 + eps_high) & (A > 0)
        m = mask.to(logprobs.dtype)
        stats = {
            "losses/total_loss": loss.item(),
            "losses/policy_loss": loss.item(),
            "policy/approx_kl": k3(-log_ratio).mean().item(),
            "policy/clipfrac": (low | high).float().mean().item(),
            "clip_ratio/low_mean": low.float().mean().item(),
            "clip_ratio/high_mean": high.float().mean().item(),
            "ratio": ratio.mean().item(),
            "padding_percentage": 1 - m.sum().item() / max(m.numel(), 1),
        }
        if weights is not None:
            stats.update(weight_stats(weights))
    return loss, stats
