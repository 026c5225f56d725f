"""Padding and position ids shared by every collate function.

Position ids follow the real tokens: ``position_ids = cumsum(attention_mask) - 1``, clamped
at 0, so a left-padded row starts at position 0 on its first real token (trlX's SFT passed
no position ids and learned nothing with left padding).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) mask -> (B, T) positions of the real tokens, 0 on padding."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def pad(seqs: Sequence[torch.Tensor], value: float | int, side: str = "right") -> torch.Tensor:
    """Stack 1-d tensors of different lengths into (B, T_max), padding on ``side``."""
    if side not in ("left", "right"):
        raise ValueError(f"padding side: must be 'left' or 'right', got {side!r}")
    seqs = [torch.as_tensor(s) for s in seqs]
    if side == "right":
        return pad_sequence(seqs, batch_first=True, padding_value=value)
    return pad_sequence([s.flip(0) for s in seqs], batch_first=True, padding_value=value).flip(1)
