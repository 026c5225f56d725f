"""Deterministic, resumable batching shared by the trainers.

Each pass over a store gets its own permutation from ``(seed, pass number)``, so the order of
any pass can be rebuilt after a resume without replaying the random number generator, and a
resumed run skips exactly the batches it had already trained on. Under several processes
each takes every ``world``-th batch of the same permutation; the permutation is padded by
wrapping around (as torch's DistributedSampler does) so every process runs the same number
of steps and no sample is dropped.
"""

from __future__ import annotations

from typing import Any, Sequence

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


def split_microbatches(batch: Sequence[Any], minibatch_size: int | None, *, tokens: Sequence[int] | None = None,
                       minibatch_tokens: int | None = None, count: int | None = None) -> list[list[Any]]:
    """A step's items in micro-batches, in order: trlX's ``train.minibatch_size`` items each
    (the last may be short; None: all at once), or with ``minibatch_tokens`` as many consecutive
    items as fit that many tokens (``tokens[i]``: item i's real tokens, :func:`real_tokens`); an
    item longer than the budget is a micro-batch of its own.

    ``count``: at least this many micro-batches, the largest (most tokens, else most items)
    halved until there are, so that every data-parallel rank runs the number they agreed on
    (sharded models gather weights in every forward). The engine weights each micro-batch by its
    items (``Engine.step``), so the step's loss is the same however it is split."""
    if minibatch_tokens is None:
        size = minibatch_size or len(batch)
        micro = [list(batch[i : i + size]) for i in range(0, len(batch), size)]
        sizes = [[1] * len(mb) for mb in micro]
    else:
        if tokens is None or len(tokens) != len(batch):
            raise ValueError(f"split_microbatches: minibatch_tokens needs one token count per item "
                             f"({0 if tokens is None else len(tokens)} for {len(batch)} items)")
        micro, sizes, used = [], [], 0
        for item, n in zip(batch, tokens):
            if not micro or used + n > minibatch_tokens:
                micro.append([])
                sizes.append([])
                used = 0
            micro[-1].append(item)
            sizes[-1].append(n)
            used += n
    if count is not None and count > len(micro):
        if count > len(batch):
            raise ValueError(f"split_microbatches: {count} micro-batches asked of {len(batch)} items; "
                             f"every data-parallel rank must hold as many items per step")
        while len(micro) < count:
            k = max((k for k in range(len(micro)) if len(micro[k]) > 1), key=lambda k: (sum(sizes[k]), len(micro[k])))
            half = len(micro[k]) // 2
            micro[k : k + 1] = [micro[k][:half], micro[k][half:]]
            sizes[k : k + 1] = [sizes[k][:half], sizes[k][half:]]
    return micro


def real_tokens(batch: Any) -> int:
    """The real tokens of a collated batch: the ones of its ``attention_mask`` (and, for
    seq2seq batches, of its ``decoder_attention_mask``)."""
    total = 0
    for key in ("attention_mask", "decoder_attention_mask"):
        mask = batch.get(key) if isinstance(batch, dict) else getattr(batch, key, None)
        if mask is not None:
            total += int(mask.sum())
    return total
