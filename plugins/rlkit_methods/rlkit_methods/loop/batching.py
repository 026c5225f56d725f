"""Deterministic, resumable batching shared by the trainers.

Each pass over a store gets its own permutation from ``(seed, pass number)``, so the order of
any pass can be rebuilt after a resume without replaying the random number generator, and a
resumed run skips exactly the batches it had already trained on. Under several processes
each takes every ``world``-th batch of the same permutation; the permutation is padded by
wrapping around (as torch's DistributedSampler does) so every process runs the same number
of steps and no sample is dropped.
"""

from __future__ import annotations

from typing import Sequence

import torch


def pass_batches(
    num_items: int,
    batch_size: int,
    *,
    seed: int,
    pass_index: int,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
) -> list[list[int]]:
    """Index batches this process trains on in one pass over ``num_items`` items."""
    if num_items <= 0:
        return []
    if shuffle:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + pass_index)
        order = torch.randperm(num_items, generator=generator).tolist()
    else:
        order = list(range(num_items))
    per_step = batch_size * world_size
    steps = -(-num_items // per_step)  # ceil
    padded = [order[i % num_items] for i in range(steps * per_step)]
    return [padded[(step * world_size + rank) * batch_size:][:batch_size] for step in range(steps)]


def eval_batches(num_items: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> list[list[int]]:
    """This process's evaluation batches, in prompt order, padded as little as the processes
    allow: as many steps as batches of ``batch_size`` need, each step's prompts split evenly,
    so every process runs the same number of batches of the same size and only the last step
    repeats prompts (fewer than ``world_size`` per batch). With ``num_items`` a multiple of
    ``batch_size x world_size`` these are :func:`pass_batches`' unshuffled batches; 20 prompts
    at ``batch_size`` 100 are one batch of 20, not 20 prompts wrapped around to 100 rows."""
    if num_items <= 0:
        return []
    steps = -(-num_items // (batch_size * world_size))  # ceil
    size = -(-num_items // (steps * world_size))
    return pass_batches(num_items, size, seed=0, pass_index=0, rank=rank, world_size=world_size, shuffle=False)


def split_microbatches(batch: Sequence[int], minibatch_size: int | None) -> list[list[int]]:
    """trlX's micro-batching: ``train.minibatch_size`` items per forward/backward."""
    size = minibatch_size or len(batch)
    return [list(batch[i : i + size]) for i in range(0, len(batch), size)]
