"""The engine's forward kinds (``rlkit_core.engine``) on a Megatron GPT's outputs.

A forward kind is two halves: :func:`model_inputs` (what every pipeline stage feeds the
model: tokens, positions, mask, the heads' indices) and :func:`kind_outputs` (on the last
stage: the method's tensors from the vocab-parallel logits and the heads). The math stays
vocab-parallel where it can:

* ``log pi(a|s) = -CE(logits, a)`` with Megatron's vocab-parallel cross-entropy, which
  all-reduces the max, the softmax denominator and the target logit over TP ranks, so the
  (B, T, V) logits are never gathered;
* ILQL's terms need the whole vocabulary at the actions: the (B, A, V / tp) slices are gathered
  over TP (a differentiable all-gather whose backward hands each rank its slice).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

# to_cpu, to_device: the engine calls forwards.to_device / forwards.to_cpu
from rlkit_methods.engine_kit import IGNORE_INDEX, batched_index_select, position_ids_from_mask, to_cpu, to_device  # noqa: F401


def get(batch: Any, key: str, default: Any = None) -> Any:
    return batch.get(key, default) if isinstance(batch, dict) else getattr(batch, key, default)


def vocab_parallel_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label]: (B, T, V / tp), (B, T) -> (B, T), identical on every TP rank."""
    from megatron.core import tensor_parallel

    # Megatron's cross-entropy subtracts the max in place: give it its own float copy
    return -tensor_parallel.vocab_parallel_cross_entropy(logits.to(torch.float32, copy=True), labels)


def gather_vocab(x: torch.Tensor) -> torch.Tensor:
    """(..., V / tp) -> (..., V), differentiable."""
    from megatron.core import tensor_parallel

    return tensor_parallel.gather_from_tensor_model_parallel_region(x.float())


def model_inputs(kind: str, batch: Any) -> dict[str, Any]:
    """input_ids, position_ids, attention_mask (B, T), head_kwargs and model_kwargs of a
    ``kind`` batch. The engine's own kind ``"logits"`` (sampling) asks the model for the last
    position's output only; its ``input_ids`` and ``position_ids`` may be the newest tokens
    alone (B, N) with the ``attention_mask`` (B, T) of every token so far and the
    ``inference_context`` (megatron-core's KV cache) that holds the others' keys and values."""
    if kind == "response":
        ids = torch.cat([get(batch, "query_tensors"), get(batch, "response_tensors")], dim=1)  # (B, Q + R)
        mask = get(batch, "attention_mask")
        head_kwargs = None
    else:
        ids, mask = get(batch, "input_ids"), get(batch, "attention_mask")
        has_heads = kind == "ilql" or (kind == "logits" and get(batch, "states_ixs") is not None)
        head_kwargs = {"states_ixs": get(batch, "states_ixs"), "actions_ixs": get(batch, "actions_ixs")} if has_heads else None
    positions = get(batch, "position_ids")
    if positions is None:
        positions = position_ids_from_mask(mask)
    model_kwargs = {"last_position_only": True, "inference_context": get(batch, "inference_context")} if kind == "logits" else {}
    return {"input_ids": ids, "position_ids": positions, "attention_mask": mask, "head_kwargs": head_kwargs,
            "model_kwargs": model_kwargs}


def kind_outputs(kind: str, output: Any, batch: Any) -> dict[str, Any]:
    """The ``kind``'s tensors from a last-stage output: logits (B, T, V / tp), or
    (logits, heads) when the model has heads."""
    logits, heads = output if isinstance(output, tuple) else (output, None)
    if kind == "logits":  # sampling: the last position's logits (B, 1, V / tp) (and the heads there)
        return {"output": output}
    if kind == "response":
        response = get(batch, "response_tensors")
        Q = get(batch, "query_tensors").shape[1]
        # position Q - 1 + t reads the query and response_<t and predicts response_t
        out = {}  # a reward model has no logits (its score head alone)
        if logits is not None:
            out["logprobs"] = vocab_parallel_logprobs(logits[:, Q - 1 : -1], response)  # (B, R)
        if heads is not None:
            out["values"] = heads[:, Q - 1 : -1, 0].float()  # (B, R)
        return out
    if kind == "tokens":
        labels = get(batch, "labels")[:, 1:]  # (B, T - 1): position t predicts token t + 1
        mask = (labels != IGNORE_INDEX).float()
        logprobs = vocab_parallel_logprobs(logits[:, :-1], labels.clamp(min=0)) * mask
        return {"logprobs": logprobs, "mask": mask}
    qs, target_qs, vs = heads
    return {
        "action_logits": gather_vocab(batched_index_select(logits, get(batch, "actions_ixs"), dim=1)),  # (B, A, V)
        "qs": tuple(gather_vocab(q) for q in qs),  # (B, A, V) each
        "target_qs": tuple(gather_vocab(q) for q in target_qs),
        "vs": vs.float(),  # (B, S, 1)
    }


def batch_size(batch: Any) -> int:
    fields = _fields(batch)
    return next(v.shape[0] for v in fields.values() if isinstance(v, torch.Tensor) and v.dim() > 0)


def _fields(batch: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(batch):
        return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    return dict(batch)


def slice_rows(batch: Any, start: int, stop: int, rows: int) -> Any:
    """Rows ``start:stop`` of every (rows, ...) tensor or per-row list of a tensor, dict or
    dataclass batch (nested); other values are shared."""
    if isinstance(batch, torch.Tensor):
        return batch[start:stop] if batch.dim() > 0 and batch.shape[0] == rows else batch
    if isinstance(batch, list) and len(batch) == rows:
        return batch[start:stop]
    if dataclasses.is_dataclass(batch) or isinstance(batch, dict):
        parts = {k: slice_rows(v, start, stop, rows) for k, v in _fields(batch).items()}
        return dataclasses.replace(batch, **parts) if dataclasses.is_dataclass(batch) else parts
    return batch


def chunk_rows(batch: Any, micro_batch_size: int) -> list[Any]:
    """A batch -> micro-batches of ``micro_batch_size`` rows, the last one smaller when the
    rows do not divide (no-grad forwards: no gradient accumulation to keep equal)."""
    rows = batch_size(batch)
    return [slice_rows(batch, i, min(i + micro_batch_size, rows), rows) for i in range(0, rows, micro_batch_size)]

