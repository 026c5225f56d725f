"""The SFT loss: next-token cross-entropy on the output tokens only.

    L = - sum_t 1[y_{t+1} != -100] log p(y_{t+1} | x_<=t) / sum_t 1[y_{t+1} != -100]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlkit_methods.sft.store import IGNORE_INDEX


def sft_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits and (B, T) labels (-100 on prompt and padding) -> scalar loss."""
    shift_logits = logits[:, :-1].float()  # (B, T-1, V) predicts the next token
    shift_labels = labels[:, 1:]  # (B, T-1)
    return F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]), shift_labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


def output_nll(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same loss from the engine's per-token log-probs: (B, T) log p(y_t), (B, T) mask of
    the output tokens -> L = -sum_t m_t log p(y_t) / max(sum_t m_t, 1)."""
    return -(logprobs * mask).sum() / mask.sum().clamp(min=1)
