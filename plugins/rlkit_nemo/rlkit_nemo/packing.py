"""Model inputs reshaped for a training step: packed rows (``train.packing``) and equal
shapes across a pipeline schedule.

Packing. A micro-batch's (B, T) rows, each padded to the longest, become one sequence
(1, L) of the L real tokens (``attention_mask`` 1), each row's tokens in order, with

* the row's own positions (``position_ids``: learned absolute embeddings read them;
  :class:`rlkit_nemo.models.gpt.HeadedGPTModel` takes rotary angles at them), and
* a block-diagonal causal mask: a token attends to the earlier tokens of its own row only.

The model runs the transformer blocks on the L tokens and scatters its last hidden states
and logits back to the (B, T) layout (zeros at the padding), so the forward kinds, the
heads' indices and the methods' losses see the padded layout. Every real token sees exactly
what it sees padded, so the losses agree with the padded path up to float error; the
blocks' matrix products skip the padding. megatron-core's local attention (the CPU's) still
forms the (L, L) scores; Transformer Engine's attention ignores an explicit mask, so packing
is refused there (its packed path, THD with ``PackedSeqParams``, is not wired).

Equal shapes. Megatron's pipeline schedule sends every micro-batch's activations between
stages in one shape, (length, rows, hidden). Micro-batches collated on their own differ
in length (and the last may hold fewer rows), so under PP each is padded to the longest
length and the most rows of the step: columns on the right with padding (causal attention:
no earlier position sees them), rows as copies of its last row; the last stage cuts the
outputs back before the kind's outputs and the loss see them.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

TAIL = -1  # the segment of the padding after a packed sequence (under PP): its own block


def pack_inputs(x: dict[str, Any]) -> dict[str, Any]:
    """:func:`rlkit_nemo.forwards.model_inputs` of a (B, T) micro-batch -> the same of one
    packed (1, L) sequence, with ``packed`` (what the model needs to scatter back)."""
    mask = x["attention_mask"].bool()
    rows, length = mask.shape
    index = mask.flatten().nonzero().squeeze(1)  # (L,) flat (row * T + column) of each real token
    segments = torch.div(index, length, rounding_mode="floor")
    packed = {"index": index, "segments": segments, "rows": rows, "length": length}
    return dict(x, input_ids=x["input_ids"].flatten()[index][None], position_ids=x["position_ids"].flatten()[index][None],
                attention_mask=None, packed=packed)


def block_causal_mask(segments: torch.Tensor) -> torch.Tensor:
    """(L,) segment of each token -> Megatron's (1, 1, L, L) boolean mask, True = hidden: a
    token sees the tokens at or before it in its own segment."""
    L = segments.shape[0]
    keys = torch.arange(L, device=segments.device)
    future = keys[None, :] > keys[:, None]
    return (future | (segments[:, None] != segments[None, :]))[None, None]


def input_shape(x: dict[str, Any]) -> tuple[int, int]:
    return tuple(x["input_ids"].shape)


def fit_inputs(x: dict[str, Any], rows: int, length: int) -> dict[str, Any]:
    """``x`` padded to (``rows``, ``length``); ``trim`` keeps its own (rows, length) unless it
    is packed (the model scatters a packed sequence back to its own layout)."""
    have_rows, have_length = input_shape(x)
    if (have_rows, have_length) == (rows, length):
        return x
    out = dict(x)
    if "packed" in x:  # one row: the tail is a segment of its own
        extra = length - have_length
        out["input_ids"] = _pad_right(x["input_ids"], extra, 0)
        out["position_ids"] = _pad_right(x["position_ids"], extra, 0)
        out["packed"] = dict(x["packed"], segments=_pad_right(x["packed"]["segments"][None], extra, TAIL)[0])
        return out
    for key, fill in (("input_ids", 0), ("position_ids", 0), ("attention_mask", 0)):
        out[key] = _repeat_last_row(_pad_right(x[key], length - have_length, fill), rows)
    if x.get("head_kwargs"):
        out["head_kwargs"] = {k: _repeat_last_row(v, rows) if isinstance(v, torch.Tensor) else v
                              for k, v in x["head_kwargs"].items()}
    out["trim"] = (have_rows, have_length)
    return out


def trim_output(kind: str, output: Any, trim: Optional[tuple[int, int]]) -> Any:
    """A last-stage output of fitted inputs cut back to the micro-batch's own (rows, length):
    logits (B, T, V / tp); heads (B, T, ...) per position, or ILQL's (qs, target_qs, vs),
    which the heads' indices already placed (rows only)."""
    if trim is None:
        return output
    rows, length = trim
    logits, heads = output if isinstance(output, tuple) else (output, None)
    logits = logits[:rows, :length] if logits is not None else None  # None: a reward model
    if heads is None:
        return logits
    if kind == "ilql":
        qs, target_qs, vs = heads
        heads = (tuple(q[:rows] for q in qs), tuple(q[:rows] for q in target_qs), vs[:rows])
    else:
        heads = heads[:rows, :length]
    return logits, heads


def unpack(values: torch.Tensor, packed: dict[str, Any]) -> torch.Tensor:
    """(L', ...) values of a packed sequence (L' >= L: a pipeline's tail padding after the L
    tokens) -> (B, T, ...) in the rows' padded layout, zeros at the padding (differentiable)."""
    index = packed["index"]
    flat = values.new_zeros((packed["rows"] * packed["length"], *values.shape[1:]))
    flat = flat.index_copy(0, index, values[: index.shape[0]])
    return flat.view(packed["rows"], packed["length"], *values.shape[1:])


def _pad_right(t: torch.Tensor, extra: int, fill: int) -> torch.Tensor:
    if extra <= 0:
        return t
    return torch.cat([t, t.new_full((t.shape[0], extra), fill)], dim=1)


def _repeat_last_row(t: torch.Tensor, rows: int) -> torch.Tensor:
    extra = rows - t.shape[0]
    return t if extra <= 0 else torch.cat([t, t[-1:].expand(extra, *t.shape[1:])])
