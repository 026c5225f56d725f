"""Forward passes over a model replica's pipeline stages, and moving what the last stage
computed to the ranks that need it.

Every rank of a replica (its TP and PP ranks) calls these in the same order with the same
data. With PP = 1 a model is called directly; with PP > 1 the micro-batches go through
Megatron's forward-only schedule (:func:`rlkit_nemo.schedule.forward_backward`), which
sends each micro-batch's hidden states from stage to stage, and only the last stage has
outputs. :func:`from_last_stage` then hands them to every stage (the loop keeps its rollout
store, and collates its batches, on every rank).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from rlkit_nemo.forwards import kind_outputs, model_inputs
from rlkit_nemo.schedule import call_model, forward_backward


def forward_outputs(model: torch.nn.Module, kind: str, micro_batches: Sequence[Any], *, pipelined: bool,
                    autocast: Optional[torch.dtype] = None) -> Optional[dict[str, Any]]:
    """The ``kind``'s outputs of ``model`` (this rank's stage) over ``micro_batches``,
    concatenated along the rows, on the last stage; None on the other stages. Micro-batches
    may differ in rows (the last of a chunk may be smaller): the pipeline schedule runs each
    run of equal shapes at once."""
    if not pipelined:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.autocast(device, dtype=autocast) if autocast else nullcontext():
            return concat_rows([kind_outputs(kind, call_model(model, model_inputs(kind, b)), b) for b in micro_batches])
    found = []
    for group in equal_shapes(kind, micro_batches):
        found += forward_backward(model, group, kind, _keep_outputs, forward_only=True, autocast=autocast)
    return concat_rows(found) if found else None


def _keep_outputs(outputs: dict[str, Any], batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """A forward-only "loss" that hands the schedule the outputs themselves."""
    return torch.zeros((), device=next(iter(_tensors(outputs))).device), outputs


def _tensors(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def equal_shapes(kind: str, micro_batches: Sequence[Any]) -> list[list[Any]]:
    """Consecutive runs of micro-batches whose model inputs have the same (rows, length)."""
    groups: list[list[Any]] = []
    shape = None
    for batch in micro_batches:
        here = tuple(model_inputs(kind, batch)["input_ids"].shape)
        if here != shape:
            groups.append([])
            shape = here
        groups[-1].append(batch)
    return groups


def concat_rows(outputs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-micro-batch output dicts -> one dict, tensors (and tuples of them) joined on dim 0."""
    if len(outputs) == 1:
        return dict(outputs[0])

    def join(values):
        first = values[0]
        if isinstance(first, torch.Tensor):
            return torch.cat(values)
        if isinstance(first, (list, tuple)):
            return type(first)(join([v[i] for v in values]) for i in range(len(first)))
        return first

    return {k: join([o[k] for o in outputs]) for k in outputs[0]}


def from_last_stage(obj: Any, ps) -> Any:
    """``obj`` of the last pipeline stage on every stage of this replica (pickled: the outputs
    of a forward kind are a dict of tensors of the kind's shapes)."""
    if ps.get_pipeline_model_parallel_world_size() == 1:
        return obj
    box = [obj if ps.is_pipeline_last_stage() else None]
    dist.broadcast_object_list(box, src=ps.get_pipeline_model_parallel_last_rank(),
                               group=ps.get_pipeline_model_parallel_group())
    return box[0]


def share_token(token: Optional[torch.Tensor], rows: int, ps, device: torch.device) -> torch.Tensor:
    """The token TP rank 0 of the last stage sampled, on every rank of this model replica."""
    if token is None:
        token = torch.zeros(rows, dtype=torch.long, device=device)
    token = token.to(device, torch.long).contiguous()
    if ps.is_pipeline_last_stage() and ps.get_tensor_model_parallel_world_size() > 1:
        dist.broadcast(token, src=ps.get_tensor_model_parallel_src_rank(), group=ps.get_tensor_model_parallel_group())
    if ps.get_pipeline_model_parallel_world_size() > 1:
        dist.broadcast(token, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group())
    return token


def seeded(make_heads: Optional[Callable], seed: int) -> Optional[Callable]:
    """``make_heads`` run from its own seed: the heads start the same at every pipeline layout
    (the last stage builds fewer blocks before them, which would move the random stream)."""
    if make_heads is None:
        return None

    def make(config, vocab_size):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return make_heads(config, vocab_size)

    return make
