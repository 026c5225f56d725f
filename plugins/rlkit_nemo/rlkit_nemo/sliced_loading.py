"""Load each rank's slice of the weights, and no more.

A *source* answers for the full (TP=1, PP=1, local-spec) Megatron state dict without holding
it: ``shape(name)``, and the rows, columns or whole of one tensor. :func:`load_weights` walks
this rank's tensors (its pipeline stage, its TP slice) and asks the source for exactly that
slice, so a rank of a TP=8 model reads an eighth of the checkpoint. Sources:

* :class:`rlkit_nemo.convert.HFWeights` over :class:`SafetensorsFile` (an HF folder: each
  tensor read from disk when asked, converted on the fly) or over an HF state dict;
* :class:`rlkit_nemo.nemo_checkpoint.NeMoWeights`: NeMo checkpoints (``.nemo``,
  ``model_weights.ckpt``, ``mp_rank_XX``), only the shards a rank needs.

The vocabulary: Megatron pads the embedding (and the output layer) to ``padded_vocab_size``
rows so that TP ranks hold equal slices; the rows past the source's vocabulary are zeros
here, and :func:`mask_padded_vocab` keeps their logits at the dtype's minimum so that they are
never sampled and carry no probability.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Dict, Iterable, Optional, Sequence

import torch
from torch import nn

from rlkit_core.errors import RlkitError

VOCAB_NAMES = ("embedding.word_embeddings.weight", "output_layer.weight")
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
                      "BOOL": torch.bool}


class Source:
    """The full Megatron state dict, read piece by piece. Subclasses give ``names``,
    ``shape`` and ``full``; ``rows``/``cols`` default to slicing ``full``."""

    def names(self) -> Iterable[str]:
        raise NotImplementedError

    def has(self, name: str) -> bool:
        return name in set(self.names())

    def shape(self, name: str) -> Sequence[int]:
        raise NotImplementedError

    def full(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` (fewer when the tensor has fewer)."""
        return self.full(name)[start:stop]

    def cols(self, name: str, start: int, stop: int) -> torch.Tensor:
        return self.full(name)[:, start:stop]


class SafetensorsFile:
    """The tensors of one or more ``.safetensors`` files, read from disk when asked.

    Plain reads (seek + readinto) instead of a memory map: pages of a mapped file count in the
    process's resident memory until it is unmapped, so a rank reading its slice through a map
    of the whole file would show the whole model in its peak RSS."""

    def __init__(self, paths: Sequence[str | os.PathLike]):
        self.index: Dict[str, tuple[str, torch.dtype, tuple[int, ...], int]] = {}
        for path in paths:
            with open(path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                if meta["dtype"] not in SAFETENSORS_DTYPES:
                    raise RlkitError(f"{path}: tensor {name} has dtype {meta['dtype']}, which rlkit-nemo does not read")
                self.index[name] = (str(path), SAFETENSORS_DTYPES[meta["dtype"]], tuple(meta["shape"]),
                                    8 + size + meta["data_offsets"][0])

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> Optional["SafetensorsFile"]:
        """The model's safetensors in an HF folder (one file or an index of shards); None without."""
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.isfile(index):
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return cls([os.path.join(folder, s) for s in shards])
        single = os.path.join(folder, "model.safetensors")
        return cls([single]) if os.path.isfile(single) else None

    def keys(self):
        return self.index.keys()

    def __contains__(self, name):
        return name in self.index

    def shape(self, name: str) -> tuple[int, ...]:
        return self.index[name][2]

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of the tensor (its first dimension), read from the file."""
        path, dtype, shape, offset = self.index[name]
        stop = min(stop, shape[0] if shape else 1)
        start = min(start, stop)
        per_row = math.prod(shape[1:])
        out = torch.empty((stop - start) * per_row, dtype=dtype)
        if out.numel():
            with open(path, "rb") as f:
                f.seek(offset + start * per_row * dtype.itemsize)
                f.readinto(out.view(torch.uint8).numpy())
        return out.reshape((stop - start, *shape[1:])) if shape else out.reshape(())

    def __getitem__(self, name: str) -> torch.Tensor:
        shape = self.shape(name)
        return self.rows(name, 0, shape[0] if shape else 1)


def _take(source: Source, key: str, local: torch.Tensor, dim: Optional[int], rank: int, glu: bool) -> torch.Tensor:
    """This rank's slice of ``key``: whole (``dim`` None), rows or columns; a gated MLP's
    ``[gate; up]`` is split half by half (each rank holds ``[gate_r; up_r]``)."""
    if dim is None:
        return source.full(key)
    if dim == 1:
        n = local.shape[1]
        return source.cols(key, rank * n, (rank + 1) * n)
    n = local.shape[0]
    if glu:
        h = n // 2
        half = source.shape(key)[0] // 2
        return torch.cat([source.rows(key, rank * h, (rank + 1) * h), source.rows(key, half + rank * h, half + (rank + 1) * h)])
    return source.rows(key, rank * n, (rank + 1) * n)


@torch.no_grad()
def load_weights(model: nn.Module, source: Source, *, keep: tuple[str, ...] = ("heads.",), vocab_size: Optional[int] = None) -> None:
    """Copy this rank's slice of ``source`` into ``model`` (this rank's stage, TP slice).
    Every tensor must be covered except those under ``keep`` (left as initialised). The
    embedding's rows past the source's (Megatron's vocabulary padding) are zeros;
    ``vocab_size``: the tokenizer's, which the source must cover."""
    from megatron.core import parallel_state

    from rlkit_nemo.models.sharding import TIED, _is_glu_fc1, _layer_offset, _renumber, _tensors
    from rlkit_nemo.te import local_name

    tp, rank = parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()
    offset = _layer_offset(model)
    for name, local in _tensors(model).items():
        key = local_name(_renumber(name, offset))
        if key == TIED[0] and not source.has(key):
            key = TIED[1]  # a tied output layer on the last stage holds the embedding
        if not source.has(key):
            if name.startswith(keep):
                continue
            raise RlkitError(f"{key}: the pretrained weights have no such tensor (they have {sorted(source.names())[:3]}...); "
                             f"is the checkpoint a model of this architecture?")
        split = getattr(local, "tensor_model_parallel", False) and tp > 1
        if key in VOCAB_NAMES:
            rows = source.shape(key)[0]
            if vocab_size is not None and rows < vocab_size:
                raise RlkitError(f"{key}: the pretrained embedding has {rows} rows but the tokenizer has {vocab_size} tokens; "
                                 f"use the model's own tokenizer")
            value = _take(source, key, local, 0, rank if split else 0, glu=False)
            if value.shape[0] < local.shape[0]:  # Megatron's padding rows
                value = torch.cat([value, value.new_zeros(local.shape[0] - value.shape[0], *value.shape[1:])])
        else:
            value = _take(source, key, local, local.partition_dim if split else None, rank, _is_glu_fc1(model, name))
        if tuple(value.shape) != tuple(local.shape):
            raise RlkitError(f"{key}: the pretrained tensor's slice is {tuple(value.shape)} but the model's is "
                             f"{tuple(local.shape)}; the checkpoint and the Megatron YAML describe different models")
        local.copy_(value.to(local.dtype))


def mask_padded_vocab(model: nn.Module, vocab_size: int):
    """Logits of the padding rows (ids >= ``vocab_size``) at the dtype's minimum on this rank's
    vocab-parallel slice, so that sampling never picks them and softmax gives them nothing
    (the minimum, not -inf: an entropy term 0 * logit stays 0). Returns the hook handle."""
    from megatron.core import parallel_state

    layer = getattr(model, "output_layer", None)
    if layer is None:
        return None
    rows = model.vocab_size // parallel_state.get_tensor_model_parallel_world_size()
    first = parallel_state.get_tensor_model_parallel_rank() * rows
    padded = torch.arange(first, first + rows) >= vocab_size  # (V / tp,)
    if not bool(padded.any()):
        return None

    def hook(module, args, output):
        logits, bias = output if isinstance(output, tuple) else (output, None)
        logits = logits.masked_fill(padded.to(logits.device), torch.finfo(logits.dtype).min)
        return (logits, bias) if isinstance(output, tuple) else logits

    return layer.register_forward_hook(hook)
