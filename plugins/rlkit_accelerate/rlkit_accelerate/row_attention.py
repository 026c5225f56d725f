"""Attention row by row over one packed sequence, with no mask (``train.packing``'s rows layout).

The rows of a micro-batch lie end to end in one sequence (1, N) with no unused position. Inside
:func:`running_rows`, the HF model's attention implementation is this module's
``rlkit_rows`` (registered in transformers' ``AttentionInterface``; having no entry in its mask
interface, the model builds no mask at all): each layer gathers its queries, keys and values
into the rows (R, H, Lmax, D), runs SDPA causally on them (``is_causal``: no N x N or W x W mask,
and the CPU kernel skips the blocks above the diagonal) and gathers the outputs back to the
sequence. A row's padded end comes after its real tokens, so causal attention shows it to none
of them; its outputs are dropped. Both gathers are index_select, so gradients flow back to
exactly the positions they came from.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F

NAME = "rlkit_rows"


@dataclass
class RowLayout:
    """Where each row of the packed sequence lies."""

    index: torch.Tensor  # (R, Lmax) flat position of each row's t-th token (its last one past its end)
    flat: torch.Tensor  # (N,) each flat position's place among the R x Lmax row positions

    @classmethod
    def of(cls, offsets: list[int], lengths: list[int], device) -> RowLayout:
        """Rows of ``lengths`` starting at ``offsets`` (those of length 0 left out)."""
        rows = [(o, n) for o, n in zip(offsets, lengths) if n > 0]
        width = max(n for _, n in rows)
        start = torch.tensor([o for o, _ in rows], device=device).unsqueeze(1)  # (R, 1)
        length = torch.tensor([n for _, n in rows], device=device).unsqueeze(1)
        t = torch.arange(width, device=device)  # (Lmax,)
        index = start + t.minimum(length - 1)  # (R, Lmax)
        flat = torch.empty(sum(n for _, n in rows), dtype=torch.long, device=device)
        real = t < length
        flat[index[real]] = torch.arange(index.numel(), device=device).view_as(index)[real]
        return cls(index, flat)


_current: ContextVar[RowLayout | None] = ContextVar("rlkit_rows_layout", default=None)


def rows_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention-function signature; query (1, H, N, D), key/value (1, Hkv, N, D)
    -> (1, N, H, D)."""
    layout = _current.get()
    if layout is None or query.shape[0] != 1:
        raise RuntimeError(f"{NAME} attention runs only on one packed sequence inside running_rows(...)")

    def rows(x):  # (1, H, N, D) -> (R, H, Lmax, D)
        return x[0].transpose(0, 1)[layout.index].transpose(1, 2)

    out = F.scaled_dot_product_attention(rows(query), rows(key), rows(value), dropout_p=dropout, is_causal=True,
                                         scale=scaling, enable_gqa=query.shape[1] != key.shape[1])  # (R, H, Lmax, D)
    return out.transpose(1, 2).flatten(0, 1)[layout.flat].unsqueeze(0), None  # (1, N, H, D)


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, rows_attention_forward)


_register()


@contextmanager
def running_rows(lm: torch.nn.Module, layout: RowLayout):
    """``lm`` (an HF model) attends row by row over ``layout`` for the forwards run inside."""
    config = lm.config
    before = config._attn_implementation
    token = _current.set(layout)
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
        _current.reset(token)
