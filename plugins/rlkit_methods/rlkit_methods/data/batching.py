"""Micro-batching: split one batch into pieces of ``mb_size`` rows for gradient accumulation."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Mapping

import torch


def _slice(value: Any, start: int, stop: int) -> Any:
    if isinstance(value, torch.Tensor) or isinstance(value, (list, tuple)):
        return value[start:stop]
    return value


def _batch_size(batch: Any) -> int:
    values = batch.values() if isinstance(batch, Mapping) else (
        [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    )
    for value in values:
        if isinstance(value, (torch.Tensor, list, tuple)):
            return len(value)
    raise ValueError("batch has no tensor or list to split")


def micro_batches(batch: Any, mb_size: int) -> list[Any]:
    """Split a dict-like or dataclass batch along its first dimension into micro-batches of
    at most ``mb_size`` rows (the last one may be smaller). Non-sequence values are shared."""
    if mb_size <= 0:
        raise ValueError(f"minibatch_size: must be > 0, got {mb_size}")
    n = _batch_size(batch)
    out = []
    for start in range(0, n, mb_size):
        stop = min(start + mb_size, n)
        if dataclasses.is_dataclass(batch):
            out.append(dataclasses.replace(batch, **{
                f.name: _slice(getattr(batch, f.name), start, stop) for f in dataclasses.fields(batch)
            }))
        else:
            sliced = {k: _slice(v, start, stop) for k, v in batch.items()}
            out.append(type(batch)(sliced) if not isinstance(batch, dict) else sliced)
    return out


class MiniBatchIterator:
    """trlX's ``MiniBatchIterator(data_loader, mb_size, num_mb)``: an iterator that gives, per
    loader batch, a list of ``num_mb`` micro-batches of ``mb_size`` rows (fewer if the batch is
    short). As in trlX it is one pass over the loader, by ``for`` or by ``next()``; make a new
    one for the next epoch."""

    def __init__(self, data_loader: Iterable[Any], mb_size: int, num_mb: int):
        if mb_size <= 0 or num_mb <= 0:
            raise ValueError(f"MiniBatchIterator: mb_size and num_mb must be > 0, got {mb_size} and {num_mb}")
        self.data_loader = data_loader
        self.data_loader_iter = iter(data_loader)
        self.mb_size = mb_size
        self.num_mb = num_mb

    def __iter__(self) -> Iterator[list[Any]]:
        return self

    def __next__(self) -> list[Any]:
        batch = next(self.data_loader_iter)  # StopIteration ends the pass
        return micro_batches(batch, self.mb_size)[: self.num_mb]

    def __len__(self) -> int:
        return len(self.data_loader)  # type: ignore[arg-type]
