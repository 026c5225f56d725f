"""Q-guided sampling and the Polyak target-Q update of ILQL."""

from __future__ import annotations

from typing import Iterable

import torch


def topk_mask(xs: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest entries of each row (B, V); the rest become -inf. k <= 0 or k >= V: no-op."""
    if k is None or k <= 0 or k >= xs.shape[-1]:
        return xs
    kth = torch.topk(xs, k, dim=-1).values[..., -1:]  # (B, 1)
    return xs.masked_fill(xs < kth, float("-inf"))


def q_guided_logits(
    logits: torch.Tensor,
    qs: torch.Tensor,
    vs: torch.Tensor,
    *,
    beta: float = 1.0,
    top_k: int = 20,
    temperature: float = 1.0,
    logit_mask: torch.Tensor | None = None,
    last_tokens: torch.Tensor | None = None,
    behaviour_top_k: int = 0,
) -> torch.Tensor:
    """Logits to sample the next token from (softmax of them is the policy)::

        pi(a | s) ∝ exp( topk( log_softmax(logits)_a + beta * (Q(s, a) - V(s)) ) / temperature )

    ``logits`` and ``qs`` are (B, V) for the last position (``qs`` already the min over
    target heads), ``vs`` is (B,) or (B, 1). ``logit_mask`` (V, V) is trlX's: entry
    ``[previous_token, token]`` True forbids ``token`` after ``previous_token``; it needs
    ``last_tokens`` (B,), the previous token of each row.

    ``behaviour_top_k`` k > 0 (rlkit's; 0, the default, is trlX's rule above): only the
    behaviour policy's k most likely tokens can be sampled; the guidance reorders them::

        pi(a | s) ∝ exp( topk( topk_k(log pi_beta(. | s))_a + beta * (Q(s, a) - V(s)) ) / temperature )

    trlX's top-k comes after adding beta * (Q - V), so at large beta a token the data never
    showed, whose Q is an extrapolation, can outrank every token the behaviour policy writes.
    """
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    if isinstance(behaviour_top_k, bool) or not isinstance(behaviour_top_k, int) or behaviour_top_k < 0:
        raise ValueError(f"behaviour_top_k: must be an integer >= 0 (0: off), got {behaviour_top_k!r}")
    if vs.dim() == 1:
        vs = vs.unsqueeze(-1)  # (B, 1)
    if logit_mask is not None:
        if last_tokens is None:
            raise ValueError("logit_mask needs last_tokens, the previous token of each row")
        forbidden = logit_mask.to(logits.device)[last_tokens.to(logit_mask.device)].bool()  # (B, V)
        logits = logits.masked_fill(forbidden, float("-inf"))
    adv = qs - vs  # (B, V)
    pi_beta = topk_mask(torch.log_softmax(logits.float(), dim=-1), behaviour_top_k)  # (B, V)
    return topk_mask(pi_beta + beta * adv, top_k) / temperature


@torch.no_grad()
def sync_target(target_params: Iterable[torch.Tensor], params: Iterable[torch.Tensor], alpha: float) -> None:
    """Polyak averaging, in place: theta_target <- alpha * theta + (1 - alpha) * theta_target."""
    for target, source in zip(target_params, params, strict=True):
        target.copy_(alpha * source + (1.0 - alpha) * target)

