"""Evaluation batches: every prompt once, in order, with as little padding as the processes
allow (20 eval prompts at batch_size 100 used to be wrapped around to 100 generated rows)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlkit_methods.loop.batching import eval_batches, pass_batches
from rlkit_methods.loop.evaluation import generate_rows


@pytest.mark.parametrize("n, size, world", [(1000, 100, 1), (200, 100, 2), (8, 4, 2), (20, 20, 1)])
def test_a_multiple_of_the_batch_gives_the_same_batches_as_before(n, size, world):
    """Where nothing was padded, nothing changes: the same rows in the same batches, so the
    same samples for a fixed seed (e.g. the bench's 1000 post-training prompts at 100)."""
    for rank in range(world):
        assert eval_batches(n, size, rank=rank, world_size=world) == pass_batches(
            n, size, seed=0, pass_index=0, rank=rank, world_size=world, shuffle=False)


def test_fewer_prompts_than_a_batch_are_one_batch_of_those_prompts():
    assert eval_batches(20, 100) == [list(range(20))]
    assert eval_batches(150, 100) == [list(range(75)), list(range(75, 150))]  # two steps, none repeated
    assert eval_batches(0, 100) == []


@pytest.mark.parametrize("n, size, world", [(20, 100, 2), (21, 100, 2), (7, 4, 3), (1, 8, 4), (250, 100, 2)])
def test_every_process_runs_the_same_batches_and_every_prompt_is_covered(n, size, world):
    per_rank = [eval_batches(n, size, rank=r, world_size=world) for r in range(world)]
    shapes = {tuple(len(b) for b in batches) for batches in per_rank}
    assert len(shapes) == 1  # same number of batches, same sizes: collectives stay in step
    (sizes,) = shapes
    assert all(s <= size for s in sizes)
    seen = [i for batches in per_rank for b in batches for i in b]
    assert set(seen) == set(range(n))
    assert len(seen) - n < world * len(sizes)  # fewer than one repeat per process and step


class Pipeline:
    def __init__(self, prompts):
        self.prompts = prompts

    def __len__(self):
        return len(self.prompts)

    def __getitem__(self, i):
        return self.prompts[i]

    def collate(self, items):
        ids = torch.tensor([[p] for p in items])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_generate_rows_generates_each_prompt_once_in_order():
    rows_seen = []

    def generate_eval(input_ids, attention_mask, **kwargs):
        rows_seen.append(input_ids.shape[0])
        return torch.cat([input_ids, input_ids + 100], dim=1)  # the "sample" names its prompt

    engine = SimpleNamespace(process_index=0, num_processes=1, gather_object=lambda obj: [obj])
    trainer = SimpleNamespace(eval_pipeline=Pipeline(list(range(20))), engine=engine, eval_batch_size=100,
                              generate_eval=generate_eval)
    rows = generate_rows(trainer, {})
    assert rows_seen == [20]  # was [100]: the 20 prompts repeated five times
    assert [r["index"] for r in rows] == list(range(20))
    assert [r["output_ids"] for r in rows] == [[i + 100] for i in range(20)]
