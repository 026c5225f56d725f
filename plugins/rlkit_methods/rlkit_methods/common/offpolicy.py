"""Samples from another sampler than the policy being trained: the truncated importance weight.

The generator that sampled the rollouts (``mu``: an inference engine, or the policy of an
earlier phase with ``train.async_rollouts``) is not exactly the trainer's ``pi_old``: its
numerics differ (kernels, precision) and, asynchronously, so do its weights. The policy-gradient
term is then re-weighted by the truncated importance ratio of the two (Yao et al. 2025, "Your
Efficient RL Framework Secretly Brings You Off-Policy RL Training"; Espeholt et al. 2018's
truncated IS in IMPALA)::

    w_t = min(pi_old(a_t|s_t) / mu(a_t|s_t), C) = min(exp(log pi_old - log mu), C)
    L   = E_{a ~ mu} [ w_t * l_t(theta) ]          l_t: the method's per-token clipped surrogate

``w_t`` is a constant (no gradient): both log-probs are fixed once the rollout is made. TRL 1.16
calls this ``vllm_importance_sampling_correction`` with mode ``token_truncate`` and C
``vllm_importance_sampling_clip_max``; rlkit keeps those names. A method whose ratio is over the
whole sequence (RLOO) uses the sequence's weight, ``min(exp(sum_t (log pi_old - log mu)), C)``
(TRL's ``sequence_truncate``). Shapes: B rows, T response tokens; ``mask`` 1 on real tokens.
"""

from __future__ import annotations

import torch


def truncated_importance_weights(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                                 cap: float) -> torch.Tensor:
    """(B, T) ``w_t = min(exp(log pi_old - log mu), C)`` on the masked tokens, 1 elsewhere (no gradient)."""
    keep = mask.bool()
    log_ratio = torch.where(keep, trainer_logprobs.detach() - sampler_logprobs.to(trainer_logprobs.dtype),
                            torch.zeros_like(trainer_logprobs))  # (B, T), 0 on padding: weight 1
    return torch.exp(log_ratio).clamp(max=cap)


def truncated_sequence_weights(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                               cap: float) -> torch.Tensor:
    """(B,) ``w_i = min(exp(sum_t m_t (log pi_old - log mu)), C)``: the weight of a sequence-level ratio."""
    keep = mask.bool()
    log_ratio = torch.where(keep, trainer_logprobs.detach() - sampler_logprobs.to(trainer_logprobs.dtype),
                            torch.zeros_like(trainer_logprobs)).sum(dim=1)  # (B,)
    return torch.exp(log_ratio).clamp(max=cap)


def weight_stats(weights: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """TRL's ``sampling/importance_sampling_ratio/{min,mean,max}`` over the weights that count."""
    values = weights[mask.bool()] if mask is not None and weights.shape == mask.shape else weights.reshape(-1)
    if values.numel() == 0:
        return {}
    return {"sampling/importance_sampling_ratio/min": values.min().item(),
            "sampling/importance_sampling_ratio/mean": values.float().mean().item(),
            "sampling/importance_sampling_ratio/max": values.max().item()}
