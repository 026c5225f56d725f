"""``ShuffledCyclicSequence``: the virtual dataset the NeMo trainers feed to Megatron's
samplers, which want a fixed length (``global_batch_size * max_steps``) over a store that is
usually shorter.

Item ``i`` lies in epoch ``e = i // n`` at position ``p = i % n`` (``n = len(data)``); each epoch
has its own permutation seeded by ``(seed, e)``, so every consecutive block of ``n`` items holds
each sample exactly once, the order is reproducible from the seed alone, and no epoch repeats
the previous one's order. (trlX permuted ``range(new_length)`` and took it modulo ``n``, which
repeats some samples within an epoch and skips others.)
"""

from __future__ import annotations

from typing import Any, Sequence


class ShuffledCyclicSequence:
    def __init__(self, new_length: int, data: Sequence[Any], seed: int):
        if len(data) == 0:
            raise ValueError("ShuffledCyclicSequence: data is empty; give at least one sample")
        if new_length < 0:
            raise ValueError(f"ShuffledCyclicSequence: new_length must be >= 0, got {new_length}")
        self.data = data
        self.new_length = new_length
        self.seed = seed
        self._epoch, self._order = -1, []  # the permutation of the epoch read last

    def _permutation(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            import torch  # here, so that listing plugins never imports torch

            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._order = epoch, torch.randperm(len(self.data), generator=generator).tolist()
        return self._order

    def __len__(self) -> int:
        return self.new_length

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += self.new_length
        if not 0 <= index < self.new_length:
            raise IndexError(f"index {index} out of range for length {self.new_length}")
        epoch, position = divmod(index, len(self.data))
        return self.data[self._permutation(epoch)[position]]
