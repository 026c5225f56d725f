"""``train.minibatch_tokens``: the accelerate engine fills micro-batches by real tokens, weights
each by its rows, so a loss that is a mean over rows (DPO's, over pairs) gives the same step
however the budget cuts it, padded or packed; under two processes every rank runs as many
micro-batches as the rank that needs most."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import prefs_setup
from test_trainer_packing import LONG, model_config
from rlkit_accelerate.trainers import AccelerateDPOTrainer

PAIRS = [{"prompt": "a", "chosen": LONG, "rejected": "b"}] + prefs_setup.walk_pairs(7)


def step_grads(budget: int | None, packing: bool, tmp_path):
    config = prefs_setup.config("dpo", tmp_path, train=dict(seq_length=48, packing=packing, minibatch_tokens=budget))
    config.model.model_path = model_config("gpt2")
    trainer = AccelerateDPOTrainer(config)
    trainer.make_experience(PAIRS, 48)
    trainer.prepare_learning()
    engine, grads, calls = trainer.engine, {}, []
    forward = engine._forward

    def counting(*args, **kwargs):
        mask = args[2]["attention_mask"]
        calls.append((mask.sum().item(), mask.shape[0]))  # the micro-batch's real tokens and rows
        return forward(*args, **kwargs)

    def keep_grads(*args, **kwargs):  # the step's gradient, not applied: every run starts from the same weights
        grads.update({n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None})

    engine._forward, engine.opt.step = counting, keep_grads
    stats = engine.step("response", [trainer.store[i] for i in range(len(PAIRS))], trainer.collate, trainer.loss)
    return stats["loss"], grads, calls


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")  # the optimizer's step is held back
@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_a_step_is_the_same_however_the_token_budget_cuts_it(packing, tmp_path):
    loss, grads, calls = step_grads(None, packing, tmp_path)
    assert len(calls) == 1
    total = calls[0][0]
    for budget in (60, 25):
        cut_loss, cut_grads, cut_calls = step_grads(budget, packing, tmp_path)
        assert len(cut_calls) >= 3 and sum(n for n, _ in cut_calls) == total
        # every micro-batch within the budget, but for a pair (two rows) longer than the budget alone
        assert all(n <= budget or rows == 2 for n, rows in cut_calls)
        assert any(n > budget for n, _ in cut_calls) == (budget == 25)
        assert cut_loss == pytest.approx(loss, rel=1e-5)
        for name, grad in grads.items():
            assert torch.allclose(cut_grads[name], grad, rtol=1e-4, atol=1e-6 * grad.abs().max().item()), name


SCRIPT = Path(__file__).with_name("token_budget_ddp.py")


@pytest.mark.slow  # a two-process run (rlkit_core.testing.lanes)
def test_every_rank_runs_the_micro_batches_the_rank_that_needs_most_asked_for(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    result = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(29400 + os.getpid() % 100), str(SCRIPT), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [torch.load(tmp_path / f"rank_{rank}.pt") for rank in (0, 1)]
    # rank 0 holds short rows (one micro-batch would do), rank 1 long ones (several)
    assert ranks[0]["alone"] < ranks[1]["alone"]
    assert ranks[0]["ran"] == ranks[1]["ran"] == ranks[1]["alone"]
    assert torch.equal(ranks[0]["grad"], ranks[1]["grad"])  # DDP averaged the gradients once, at the last micro-batch
