"""What an engine may import from rlkit-methods: one module, for the built-in engines and a
third party's alike.

An engine (``rlkit_core.engine.Engine``) owns the hardware side; the methods own the math.
Where the two meet, an engine needs a little of both: plumbing every engine writes the same
way (moving batches between devices, splitting a step into micro-batches, averaging a step's
stats, the ignore index of ``"tokens"`` labels) and the few method-side functions an engine
applies itself because it holds the tensors (the log-probs of labels under its logits,
ILQL's Q-guided logits and target-Q update, positions from a padding mask). They are all
here, under one name each. Nothing else in ``rlkit_methods`` is an engine's to import
(``tests/core/test_boundaries.py`` says so); a method's internals may move without notice.

Plumbing

* :func:`to_device`, :func:`to_cpu`: a batch or an output structure (tensors in dicts, lists,
  tuples, named tuples and dataclasses, nested) moved, everything else kept as it is;
  :func:`map_tensors` walks the same structures with any function.
* :func:`split_microbatches`: a step's items in micro-batches of ``train.minibatch_size``
  items or ``train.minibatch_tokens`` real tokens (:func:`real_tokens` counts a collated
  batch's), as many as every data-parallel rank agreed on.
* :func:`mean_stats`: one stats dict for a step from its micro-batches' dicts.
* :data:`IGNORE_INDEX`: the label of a position that does not count (``-100``, as
  ``CrossEntropyLoss``), in the ``"tokens"`` forward kind's ``labels``.
* :func:`load_tokenizer`, :func:`get_optimizer_class`, :func:`get_scheduler_class`: the
  config's ``tokenizer``, ``optimizer.name`` and ``scheduler.name`` read as trlX reads them.

Method-side functions an engine applies

* :func:`logprobs_of_labels`: ``log softmax(logits)[label]``.
* :func:`position_ids_from_mask`: ``cumsum(attention_mask) - 1``, clamped at 0.
* :func:`batched_index_select`: rows of (B, T, ...) at per-row indices (ILQL's states and actions).
* :func:`q_guided_logits`, :func:`topk_mask`: ILQL's steered sampling
  (``rlkit_core.engine.QGuidance``); :func:`sync_target`: its Polyak target-Q update.
* :func:`make_score_head`, :func:`save_sequence_classifier`: a reward model's head
  (``ModelSpec`` option ``score_head``) and its export as an HF sequence classifier.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import torch

from rlkit_methods.common.optim import get_optimizer_class, get_scheduler_class
from rlkit_methods.common.stats import logprobs_of_labels
from rlkit_methods.data.padding import position_ids_from_mask
from rlkit_methods.data.tokenizers import load_tokenizer
from rlkit_methods.ilql.losses import batched_index_select
from rlkit_methods.ilql.sampling import q_guided_logits, sync_target, topk_mask
from rlkit_methods.loop.batching import real_tokens, split_microbatches
from rlkit_methods.preferences.export import make_score_head, save_sequence_classifier
from rlkit_methods.sft.store import IGNORE_INDEX

__all__ = [
    "IGNORE_INDEX",
    "batched_index_select",
    "get_optimizer_class",
    "get_scheduler_class",
    "load_tokenizer",
    "logprobs_of_labels",
    "make_score_head",
    "map_tensors",
    "mean_stats",
    "position_ids_from_mask",
    "q_guided_logits",
    "real_tokens",
    "save_sequence_classifier",
    "split_microbatches",
    "sync_target",
    "to_cpu",
    "to_device",
    "topk_mask",
]


def map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """``value`` with ``fn`` applied to every tensor in it: through dicts (a plain dict comes
    back), lists, tuples, named tuples and dataclass instances, nested; anything else as is."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_tensors(fn, v) for k, v in value.items()}
    if isinstance(value, list):
        return [map_tensors(fn, v) for v in value]
    if isinstance(value, tuple):
        items = [map_tensors(fn, v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a named tuple takes fields
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: map_tensors(fn, getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value


def to_device(batch: Any, device: torch.device | str) -> Any:
    """Every tensor of ``batch`` on ``device`` (see :func:`map_tensors` for the structures)."""
    return map_tensors(lambda t: t.to(device), batch)


def to_cpu(outputs: Any) -> Any:
    """Every tensor of ``outputs`` detached and on the CPU, as the engine interface hands
    results back (``rlkit_core.engine``: tensors come out on the CPU)."""
    return map_tensors(lambda t: t.detach().cpu(), outputs)


def mean_stats(stats: Sequence[Mapping[str, Any]], weights: Sequence[float] | None = None) -> dict[str, float]:
    """One stats dict from the micro-batches' dicts: ``sum_i w_i s_i / sum_i w_i`` per key
    (``weights`` None: equal weights). A key missing from some micro-batch is averaged over
    those that have it."""
    if weights is not None and len(weights) != len(stats):
        raise ValueError(f"mean_stats: {len(weights)} weights for {len(stats)} stats dicts; give one per micro-batch")
    weights = [1.0] * len(stats) if weights is None else [float(w) for w in weights]
    totals: dict[str, float] = {}
    norms: dict[str, float] = {}
    for one, w in zip(stats, weights):
        for key, value in one.items():
            totals[key] = totals.get(key, 0.0) + w * float(value)
            norms[key] = norms.get(key, 0.0) + w
    return {key: totals[key] / norms[key] if norms[key] else float("nan") for key in totals}
