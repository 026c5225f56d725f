"""Full (unsplit) state dicts <-> this rank's tensor/pipeline shard of a Megatron model.

A *full* state dict is what a TP=1, PP=1 model of the same architecture holds: global layer
numbers, whole matrices. Sharding takes this rank's slice of each tensor-parallel tensor along
its ``partition_dim`` (Megatron's fused QKV is laid out per query group, so equal chunks are
whole groups) and this stage's layers; gathering is the inverse, collective over TP and PP.
It is how converted HF weights enter a parallel model and how a parallel model is exported.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator

import torch
import torch.distributed as dist
from torch import nn

from megatron.core import parallel_state

LAYER = re.compile(r"^(.*?decoder\.layers\.)(\d+)(\..*)$")
TIED = ("output_layer.weight", "embedding.word_embeddings.weight")


def _layer_offset(model: nn.Module) -> int:
    pp, rank = parallel_state.get_pipeline_model_parallel_world_size(), parallel_state.get_pipeline_model_parallel_rank()
    return rank * (model.config.num_layers // pp)


def _is_glu_fc1(model: nn.Module, name: str) -> bool:
    """A gated MLP's first layer (Llama's [gate; up]), which TP splits half by half."""
    return model.config.gated_linear_unit and ".mlp.linear_fc1." in name


def _renumber(name: str, offset: int) -> str:
    m = LAYER.match(name)
    return f"{m.group(1)}{int(m.group(2)) + offset}{m.group(3)}" if m else name


def _tensors(model: nn.Module) -> Dict[str, torch.Tensor]:
    """Parameters and persistent buffers by state-dict name (TE's _extra_state left out)."""
    params = dict(model.named_parameters())
    return {k: params.get(k, v) for k, v in model.state_dict(keep_vars=True).items() if not k.endswith("_extra_state")}


@torch.no_grad()
def load_full_state_dict(model: nn.Module, full: Dict[str, torch.Tensor], keep: tuple[str, ...] = ()) -> None:
    """Copy this rank's slice of ``full`` into ``model``; every local tensor must be covered
    except those whose names start with one of ``keep`` (left as initialised when absent)."""
    tp, tp_rank = parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()
    offset = _layer_offset(model)
    for name, local in _tensors(model).items():
        key = _renumber(name, offset)
        if key not in full and key == TIED[0]:
            key = TIED[1]  # a tied output layer on the last stage holds the embedding
        if key not in full and name.startswith(keep):
            continue
        if key not in full:
            raise KeyError(f"{key}: not in the full state dict (has {len(full)} keys, e.g. {sorted(full)[:3]})")
        source = full[key]
        if getattr(local, "tensor_model_parallel", False) and tp > 1:
            if _is_glu_fc1(model, name):  # [gate; up]: each rank holds its slice of both
                source = torch.cat([half.chunk(tp)[tp_rank] for half in source.chunk(2)])
            else:
                source = source.chunk(tp, dim=local.partition_dim)[tp_rank]
        if source.shape != local.shape:
            raise ValueError(f"{key}: full shard {tuple(source.shape)} does not fit {name} {tuple(local.shape)}")
        local.copy_(source.to(local.dtype))


@torch.no_grad()
def full_state_dict(model: nn.Module) -> Dict[str, torch.Tensor]:
    """The TP=1, PP=1 state dict of a parallel model, on the CPU of every rank (collective)."""
    tp = parallel_state.get_tensor_model_parallel_world_size()
    offset = _layer_offset(model)
    out = {}
    for name, local in _tensors(model).items():
        value = local.detach()
        if getattr(local, "tensor_model_parallel", False) and tp > 1:
            parts = [torch.empty_like(value) for _ in range(tp)]
            dist.all_gather(parts, value.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
            if _is_glu_fc1(model, name):
                value = torch.cat([torch.cat([p.chunk(2)[half] for p in parts]) for half in (0, 1)])
            else:
                value = torch.cat(parts, dim=local.partition_dim)
        out[_renumber(name, offset)] = value.cpu()
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        stages = [None] * parallel_state.get_pipeline_model_parallel_world_size()
        dist.all_gather_object(stages, out, group=parallel_state.get_pipeline_model_parallel_group())
        out = {}
        for stage in stages:
            out.update(stage)
    if TIED[0] in out and TIED[1] in out and torch.equal(out[TIED[0]], out[TIED[1]]):
        del out[TIED[0]]  # the last stage's copy of a tied embedding
    return out


def gathered_tensors(model) -> Iterator[tuple[str, torch.Tensor | None]]:
    """This stage's tensors by full (TP=1, PP=1) name, one at a time: whole on TP rank 0, None
    on the other TP ranks (collective over the tensor-parallel group)."""
    ps = parallel_state
    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    group = ps.get_tensor_model_parallel_group()
    offset = _layer_offset(model)
    for name, local in _tensors(model).items():
        value = local.detach()
        if getattr(local, "tensor_model_parallel", False) and tp > 1:
            parts = [torch.empty_like(value) for _ in range(tp)] if tp_rank == 0 else None
            dist.gather(value.contiguous(), parts, dst=dist.get_global_rank(group, 0), group=group)
            if tp_rank != 0:
                yield _renumber(name, offset), None
                continue
            if _is_glu_fc1(model, name):
                value = torch.cat([torch.cat([p.chunk(2)[half] for p in parts]) for half in (0, 1)])
            else:
                value = torch.cat(parts, dim=local.partition_dim)
            del parts
        yield _renumber(name, offset), (value if tp_rank == 0 else None)  # on the model's device


@torch.no_grad()
def main_state_dict(model: nn.Module, main: bool):
    """The TP=1, PP=1 state dict on the main process (global rank 0) alone, None elsewhere
    (collective over the model replica of data-parallel rank 0; the other replicas, which hold
    the same weights, return at once). Each tensor-parallel tensor is gathered to TP rank 0
    one tensor at a time and each stage's dict sent to the first stage, so no rank but the
    main one ever holds more than its shard and one tensor in flight."""
    ps = parallel_state
    if ps.get_data_parallel_rank() != 0:
        return None
    if ps.get_tensor_model_parallel_rank() != 0:
        for _ in gathered_tensors(model):  # the gathers are collective: take part, keep nothing
            pass
        return None
    out = {name: value.cpu() for name, value in gathered_tensors(model)}
    pp = ps.get_pipeline_model_parallel_world_size()
    if pp > 1:
        pgroup = ps.get_pipeline_model_parallel_group()
        first = dist.get_global_rank(pgroup, 0)
        stages = [None] * pp if dist.get_rank() == first else None
        dist.gather_object(out, stages, dst=first, group=pgroup)
        if dist.get_rank() != first:
            return None
        out = {}
        for stage in stages:
            out.update(stage)
    if TIED[0] in out and TIED[1] in out and torch.equal(out[TIED[0]], out[TIED[1]]):
        del out[TIED[0]]
    return out if main else None
