"""Sharded engines: what the trainer does differently under DeepSpeed ZeRO and FSDP.

Under ZeRO-3 and FSDP each rank holds a slice of every weight, and a forward pass gathers
the slices with collectives. Generation runs a different number of forward passes on each
rank (each stops when its own batch is done), so the ranks would wait on each other forever.
``full_parameters`` gathers the whole model once on every rank; inside it forward passes
need no collectives, so generation and export run as on one process. The cost is one full
copy of the weights per rank while it is open (as trlX and DeepSpeed's hybrid engine do).

Everything here inspects the model, not the accelerate state, so it also works (and is
tested) with models sharded by torch or DeepSpeed directly.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from rlkit_core.errors import ConfigError


def sharding_kind(model: nn.Module) -> str | None:
    """``"zero3"``, ``"fsdp2"``, ``"fsdp1"`` or None (unsharded), from one pass over the model."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    if any(hasattr(p, "ds_id") for p in model.parameters()):  # ZeRO-3 tags every parameter
        return "zero3"
    kinds = {type(m) for m in model.modules()}
    if any(issubclass(k, FSDPModule) for k in kinds):
        return "fsdp2"
    if any(issubclass(k, FullyShardedDataParallel) for k in kinds):
        return "fsdp1"
    return None


def is_sharded(model: nn.Module) -> bool:
    return sharding_kind(model) is not None


def fsdp2_modules(model: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def local_shard(param: torch.Tensor) -> torch.Tensor:
    """The part of ``param`` this rank holds: ZeRO-3 keeps it in ``ds_tensor`` (``param`` itself
    is empty outside a gather); FSDP2's DTensor and unsharded tensors work in place as they are.
    Elementwise updates of equally shaped parameters (ILQL's target sync) work on the shards."""
    return param.ds_tensor if hasattr(param, "ds_tensor") else param


@contextmanager
def full_parameters(model: nn.Module) -> Iterator[None]:
    """Every rank holds the full weights inside; nothing to do for unsharded models.

    Re-entrant: a nested use (generation inside an evaluation) is free. Enter it on every
    rank: gathering is a collective."""
    kind = None if getattr(model, "_rlkit_full_parameters", False) else sharding_kind(model)
    if kind is None:
        yield
        return
    model._rlkit_full_parameters = True
    try:
        if kind == "zero3":
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
                yield
        elif kind == "fsdp2":
            with _fsdp2_unsharded(fsdp2_modules(model)):
                yield
        else:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            with FSDP.summon_full_params(model, writeback=False, recurse=True):
                yield
    finally:
        model._rlkit_full_parameters = False


@contextmanager
def _fsdp2_unsharded(modules: list[nn.Module]) -> Iterator[None]:
    # FSDP2 reshards after each forward by default; keep the weights gathered until exit.
    # torch has a setter but no getter for that setting, so restore what the setter changes.
    states = [m._get_fsdp_state() for m in modules]
    # the first forward normally picks the root; generation may run inner modules first
    # (``base_model.generate`` on a sharded wrapper), so initialise from the outermost one
    states[0]._lazy_init()
    saved = [(s._auto_reshard_after_forward, [g.post_forward_mesh_info for g in s._fsdp_param_groups]) for s in states]
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
    for m in modules:
        m.unshard()
    try:
        yield
    finally:
        for m, state, (auto, mesh_infos) in zip(modules, states, saved):
            m.reshard()
            state._auto_reshard_after_forward = auto
            for group, mesh_info in zip(state._fsdp_param_groups, mesh_infos):
                group.post_forward_mesh_info = mesh_info


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The unsharded state dict on CPU, on the main rank (an empty dict elsewhere).

    ``None`` for an unsharded model: its own ``state_dict`` is already complete. Call on every
    rank: gathering is a collective."""
    kind = sharding_kind(model)
    if kind is None:
        return None
    if kind == "zero3":
        rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        inner = getattr(model, "module", model)  # the DeepSpeed engine's keys start with "module."
        with full_parameters(model):
            return {k: v.detach().cpu().clone() for k, v in inner.state_dict().items()} if rank0 else {}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def expose_block_classes(model: nn.Module) -> None:
    """accelerate's FSDP wraps each block class the model names in ``_no_split_modules``;
    rlkit's wrappers (policy with heads, ILQL heads) pass on their HF model's names."""
    if getattr(model, "_no_split_modules", None) is None:
        names = getattr(getattr(model, "base_model", None), "_no_split_modules", None)
        if names:
            model._no_split_modules = list(names)


@contextmanager
def whole_model_construction(accelerator: Any) -> Iterator[None]:
    """Build the model whole under ZeRO-3: DeepSpeed shards it in ``prepare``.

    transformers otherwise partitions every model it builds while a ZeRO-3 config is active
    (zero.Init), and rlkit inspects the model and copies blocks (the hydra reference) first."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None or plugin.zero_stage != 3:
        yield
        return
    if plugin.zero3_init_flag:
        raise ConfigError("deepspeed zero3_init_flag: rlkit builds the model whole before ZeRO-3 shards it "
                          "(the hydra reference copies blocks); set zero3_init_flag: false")
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        plugin.set_deepspeed_weakref()


def configure_deepspeed(accelerator: Any, batch_size: int, minibatch_size: int | None, max_grad_norm: float | None) -> None:
    """Fill in what DeepSpeed needs before ``prepare`` when no dataloader is prepared.

    The trainer accumulates micro-batches itself (weighting each by its size), so DeepSpeed's
    own accumulation is 1 and the step boundary comes from ``sync_gradients``; clipping is
    DeepSpeed's: ``train.max_grad_norm``, or the DeepSpeed config's ``gradient_clipping`` when
    train sets none (as trlX, whose launch configs clip there)."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    config = plugin.deepspeed_config
    micro = minibatch_size or batch_size
    for key, value in (("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", 1)):
        if config.get(key, "auto") not in ("auto", value):
            raise ConfigError(f"deepspeed config {key}: {config[key]} conflicts with train.minibatch_size/batch_size; "
                              f"set it to auto (rlkit sets {value})")
        config[key] = value
    config["train_batch_size"] = micro * accelerator.num_processes
    clipping = config.get("gradient_clipping", "auto")
    if clipping in ("auto", None) or float(clipping) == 0.0:
        config["gradient_clipping"] = float(max_grad_norm or 0.0)
    elif max_grad_norm and float(clipping) != float(max_grad_norm):
        raise ConfigError(f"deepspeed config gradient_clipping: {clipping} conflicts with train.max_grad_norm: "
                          f"{max_grad_norm}; set one of them (gradient_clipping: auto takes train's)")
    # otherwise the DeepSpeed config's own clipping stays (trlX's launch configs clip at 1.0)
    # the optimizer is train's (torch AdamW etc.); ZeRO otherwise only accepts its own list
    config.setdefault("zero_allow_untested_optimizer", True)
