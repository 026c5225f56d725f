"""The NeMo engine's training state in a checkpoint folder, one file per rank where ranks differ.

* ``megatron_layout.json`` (main process): TP, PP and DP sizes, checked on load;
* ``model_tp{t}_pp{p}.safetensors`` (data-parallel rank 0 of each model position): this
  rank's shard of the weights, heads included;
* ``optimizer_rank{r}.pt`` (every rank): the optimizer state it holds — the whole state of its
  shard for Megatron's plain optimizer, its slice of the state and of the fp32 main weights
  for the distributed optimizer — read back with ``torch.load(weights_only=True)``;
* ``scheduler.json`` (main process): the LR schedule's ``state_dict``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rlkit_core.errors import RlkitError

LAYOUT_FILE = "megatron_layout.json"
SCHEDULER_FILE = "scheduler.json"
SCORE_KEY = "heads.score.weight"  # a reward model's head (models/heads.py ScoreHead)


def layout(ps) -> dict[str, int]:
    return {"tensor_model_parallel_size": ps.get_tensor_model_parallel_world_size(),
            "pipeline_model_parallel_size": ps.get_pipeline_model_parallel_world_size(),
            "data_parallel_size": ps.get_data_parallel_world_size()}


def shard_file(ps) -> str:
    return f"model_tp{ps.get_tensor_model_parallel_rank()}_pp{ps.get_pipeline_model_parallel_rank()}.safetensors"


def module_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in module.state_dict().items() if isinstance(v, torch.Tensor) and not k.endswith("_extra_state")}


def host_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This rank's tensors on the host for safetensors, without a second copy of the shard:
    CPU tensors as they are, a copy only where two names share storage (safetensors refuses)."""
    out, seen = {}, set()
    for name, value in module_tensors(module).items():
        value = value.detach().cpu().contiguous()
        key = (value.untyped_storage().data_ptr(), value.storage_offset())
        out[name] = value.clone() if key in seen else value
        seen.add(key)
    return out


def _optimizers(optimizer) -> list:
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


def optimizer_state(optimizer) -> list[dict[str, Any]]:
    """This rank's optimizer state, per chained optimizer."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    out = []
    for opt in _optimizers(optimizer):
        if isinstance(opt, DistributedOptimizer):  # this rank's shard: inner torch state + fp32 main weights
            main = [[p.detach().cpu().clone() for p in group] for group in opt.shard_fp32_from_float16_groups]
            out.append({"inner": opt.optimizer.state_dict(), "main": main})
        else:
            out.append({"whole": opt.state_dict()})
    return out


def load_optimizer_state(optimizer, states: list[dict[str, Any]]) -> None:
    opts = _optimizers(optimizer)
    if len(opts) != len(states):
        raise RlkitError(f"the checkpoint holds {len(states)} optimizer states, this model has {len(opts)}")
    for opt, state in zip(opts, states):
        if "whole" in state:
            opt.load_state_dict(state["whole"])
            continue
        opt.optimizer.load_state_dict(state["inner"])
        with torch.no_grad():
            for group, saved in zip(opt.shard_fp32_from_float16_groups, state["main"]):
                for param, value in zip(group, saved):
                    param.copy_(value)


def save(directory: Path, ps, module, optimizer, schedule, *, is_main: bool) -> None:
    from safetensors.torch import save_file

    if is_main:
        (directory / LAYOUT_FILE).write_text(json.dumps(layout(ps)))
        (directory / SCHEDULER_FILE).write_text(json.dumps(schedule.state_dict()))
    if ps.get_data_parallel_rank() == 0:
        save_file(host_tensors(module), str(directory / shard_file(ps)))
    torch.save(optimizer_state(optimizer), directory / f"optimizer_rank{torch.distributed.get_rank()}.pt")


def load(directory: Path, ps, module, optimizer, schedule) -> None:
    from safetensors.torch import load_file

    path = directory / LAYOUT_FILE
    if not path.is_file():
        raise RlkitError(f"{directory}: no {LAYOUT_FILE}; not a checkpoint of the NeMo engine")
    saved, here = json.loads(path.read_text()), layout(ps)
    if saved != here:
        diff = ", ".join(f"{k.split('_model')[0].split('_size')[0]} {saved.get(k)} -> {v}" for k, v in here.items() if saved.get(k) != v)
        raise RlkitError(f"{directory}: saved with {saved} but this run has {here} ({diff}); "
                         f"resume with the Megatron YAML's parallel sizes and the same number of processes")
    weights = load_file(str(directory / shard_file(ps)))
    local = module_tensors(module)
    if set(weights) != set(local):
        missing = sorted(set(local) ^ set(weights))[:3]
        raise RlkitError(f"{directory}: the model shard does not fit this model (differs in {missing}); "
                         f"resume with the config it was saved with")
    with torch.no_grad():
        for name, value in weights.items():
            local[name].copy_(value)
    states = torch.load(directory / f"optimizer_rank{torch.distributed.get_rank()}.pt", map_location="cpu", weights_only=True)
    load_optimizer_state(optimizer, states)
    schedule.load_state_dict(json.loads((directory / SCHEDULER_FILE).read_text()))


def export(directory: Path, full: dict[str, torch.Tensor], hf_config, tokenizer) -> None:
    """An HF folder (when the model came from HF) and the heads beside it; otherwise the
    Megatron full state dict (TP=1, PP=1 names). Main process only."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    heads = {k: v.contiguous() for k, v in full.items() if k.startswith("heads.")}
    trunk = {k: v for k, v in full.items() if not k.startswith("heads.")}
    if hf_config is not None:
        from transformers import AutoModelForCausalLM

        from rlkit_nemo.convert import megatron_to_hf

        model = AutoModelForCausalLM.from_config(hf_config)
        _, unexpected = model.load_state_dict(megatron_to_hf(trunk, hf_config), strict=False)
        if unexpected:
            raise RlkitError(f"export: converted weights the HF model does not have: {unexpected[:3]}")
        if SCORE_KEY in heads:  # a reward model: one sequence-classifier folder, no heads file
            from rlkit_methods.engine_kit import save_sequence_classifier

            if hf_config.pad_token_id is None:
                model.config.pad_token_id = tokenizer.pad_token_id
            save_sequence_classifier(model, heads.pop(SCORE_KEY), directory)
        else:
            model.save_pretrained(directory)
    else:
        save_file({k: v.contiguous() for k, v in trunk.items()}, str(directory / "megatron_model.safetensors"))
    if heads:
        save_file(heads, str(directory / "rlkit_heads.safetensors"))
    tokenizer.save_pretrained(directory)
