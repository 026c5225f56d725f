"""An HF folder written from a tensor/pipeline-parallel model a layer at a time.

The model's tensors reach the main process one at a time (:func:`stream_tensors`: each
tensor-parallel one gathered to TP rank 0, each later stage's sent on to the first stage), are
grouped by layer, converted to HF names as soon as a layer is whole, and written to
safetensors shards of at most ``max_shard_size`` bytes with ``model.safetensors.index.json``
(transformers' layout for sharded checkpoints; one shard is ``model.safetensors``). So the
main process holds one shard and one layer beyond its own slice, never the whole model (the
heads, which ``rlkit_heads.safetensors`` keeps in one file, are held whole).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from rlkit_core.errors import ConfigError, RlkitError

DEFAULT_SHARD_SIZE = 1_000_000_000  # bytes; transformers' "1GB"
INDEX_FILE = "model.safetensors.index.json"
UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "B": 1}


def shard_bytes(size) -> int:
    """``max_shard_size`` as bytes: an int, or transformers' strings ("500MB", "2GiB")."""
    if isinstance(size, int) and size > 0:
        return size
    text = str(size).strip().upper()
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].strip().replace(".", "", 1).isdigit():
            return int(float(text[: -len(unit)]) * UNITS[unit])
    raise ConfigError(f"max_shard_size: {size!r} is not a size; give bytes or a string such as '500MB' or '2GiB'")


def stream_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's full tensors in state-dict order (stage by stage), yielded on the main
    process (global rank 0) only. Collective over the model replica of data-parallel rank 0:
    every one of its ranks must run the iterator to its end; other replicas return at once."""
    from megatron.core import parallel_state as ps

    from rlkit_nemo.models.sharding import gathered_tensors

    if ps.get_data_parallel_rank() != 0:
        return
    pp, stage = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_rank()
    tp_rank = ps.get_tensor_model_parallel_rank()
    pgroup = ps.get_pipeline_model_parallel_group() if pp > 1 else None
    first = dist.get_global_rank(pgroup, 0) if pp > 1 else None
    device = next(model.parameters()).device
    for sender in range(pp):
        if sender == stage:
            for name, value in gathered_tensors(model):
                if value is None:
                    continue
                if stage == 0:
                    yield name, value.cpu()
                else:  # on to the first stage, one tensor at a time, from the device (NCCL sends no host tensor)
                    dist.send_object_list([(name, tuple(value.shape), value.dtype)], dst=first, group=pgroup)
                    dist.send(value.contiguous(), dst=first, group=pgroup)
            if stage > 0 and tp_rank == 0:
                dist.send_object_list([None], dst=first, group=pgroup)
        elif stage == 0 and tp_rank == 0:
            source = dist.get_global_rank(pgroup, sender)
            while True:
                box = [None]
                dist.recv_object_list(box, src=source, group=pgroup)
                if box[0] is None:
                    break
                name, shape, dtype = box[0]
                value = torch.empty(shape, dtype=dtype, device=device)
                dist.recv(value, src=source, group=pgroup)
                yield name, value.cpu()


class ShardWriter:
    """HF tensors into safetensors shards of at most ``max_bytes`` (a group larger than that is
    one shard); ``peak_bytes``: the most tensor bytes held at once, this writer's and the
    caller's pending ones (:meth:`hold`)."""

    def __init__(self, directory: Path, max_bytes: int):
        self.directory, self.max_bytes = directory, max_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = self.peak_bytes = self.total_bytes = 0
        self.files: list[tuple[str, list[str]]] = []

    def hold(self, extra: int) -> None:
        self.peak_bytes = max(self.peak_bytes, self.pending_bytes + extra)

    def add(self, tensors: dict[str, torch.Tensor]) -> None:
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if self.pending and self.pending_bytes + size > self.max_bytes:
            self.flush()
        self.pending.update(tensors)
        self.pending_bytes += size
        self.hold(0)

    def flush(self) -> None:
        from safetensors.torch import save_file

        if not self.pending:
            return
        name = f"part-{len(self.files):05d}.safetensors"
        save_file({k: v.contiguous() for k, v in self.pending.items()}, str(self.directory / name), metadata={"format": "pt"})
        self.files.append((name, list(self.pending)))
        self.total_bytes += self.pending_bytes
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> list[str]:
        """The shards under transformers' names, and the index when there are several."""
        self.flush()
        n = len(self.files)
        final = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        weight_map = {}
        for (name, keys), target in zip(self.files, final):
            os.replace(self.directory / name, self.directory / target)
            weight_map.update(dict.fromkeys(keys, target))
        if n > 1:
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
            (self.directory / INDEX_FILE).write_text(json.dumps(index, indent=2))
        return sorted(weight_map)


def export_hf(directory: Path, model, hf_config, tokenizer, *, is_main: bool,
              max_shard_size=DEFAULT_SHARD_SIZE) -> ShardWriter | None:
    """``model`` (this rank's stage and TP slice) as an HF folder in ``directory``, heads in
    ``rlkit_heads.safetensors``; every rank of the replica calls it. Returns the writer on the
    main process (its ``peak_bytes`` and ``files``), None elsewhere."""
    from safetensors.torch import save_file

    from rlkit_nemo.convert import layer_to_hf, megatron_model_config, top_to_hf
    from rlkit_nemo.models.sharding import LAYER
    from rlkit_nemo.te import local_name

    limit = shard_bytes(max_shard_size)
    tied = megatron_model_config(hf_config)["share_embeddings_and_output_weights"]
    dtype = torch.get_default_dtype()  # what AutoModelForCausalLM.from_config holds and saves
    writer = heads = None
    if is_main:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in (*directory.glob("model.safetensors"), *directory.glob("model-*-of-*.safetensors"), directory / INDEX_FILE):
            stale.unlink(missing_ok=True)  # an earlier export's weights: transformers would read a stale model.safetensors first
        writer, heads = ShardWriter(directory, limit), {}
    group: dict[str, torch.Tensor] = {}
    group_key = None

    def convert(part: dict[str, torch.Tensor], key) -> None:
        out = layer_to_hf(part, key, hf_config) if isinstance(key, int) else top_to_hf(part, hf_config, lm_head=not tied)
        out = {k: v.to(dtype) if v.is_floating_point() else v for k, v in out.items()}
        writer.hold(sum(t.numel() * t.element_size() for t in (*part.values(), *out.values())))
        writer.add(out)

    for name, value in stream_tensors(model):
        name = local_name(name)
        if name.startswith("heads."):
            heads[name] = value.contiguous()
            continue
        match = LAYER.match(name)
        key = int(match.group(2)) if match else name
        if key != group_key and group:
            convert(group, group_key)
            group = {}
        group_key, group[name] = key, value
        writer.hold(sum(t.numel() * t.element_size() for t in group.values()))
    if not is_main:
        return None
    if group:
        convert(group, group_key)
    _check_and_write_config(directory, set(writer.close()), hf_config, tied, dtype)
    if heads:
        save_file(heads, str(directory / "rlkit_heads.safetensors"))
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return writer


def _check_and_write_config(directory: Path, written: set[str], hf_config, tied: bool, dtype: torch.dtype) -> None:
    """The names written are the HF model's (a tied lm_head left out, as transformers saves
    it); its config.json and generation_config.json, as ``save_pretrained`` writes them."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # names and config only: no memory
        skeleton = AutoModelForCausalLM.from_config(hf_config)
    expected = set(skeleton.state_dict()) - ({"lm_head.weight"} if tied else set())
    if written != expected:
        extra, missing = sorted(written - expected)[:3], sorted(expected - written)[:3]
        raise RlkitError(f"export: the converted weights do not match the HF model (not in it: {extra}; missing: {missing})")
    skeleton.config.architectures = [type(skeleton).__name__]
    # transformers >= 4.56 names it dtype (torch_dtype before)
    setattr(skeleton.config, "dtype" if hasattr(skeleton.config, "dtype") else "torch_dtype", dtype)
    skeleton.config.save_pretrained(directory)
    if skeleton.can_generate():
        skeleton.generation_config.save_pretrained(directory)
