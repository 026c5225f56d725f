"""Run by test_trainer_token_budget.py under ``torchrun --nproc_per_node 2`` (gloo, CPU): one
SFT step with ``train.minibatch_tokens`` where rank 0 holds short rows and rank 1 long ones."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import walks_setup  # noqa: E402
from rlkit_accelerate.trainers import AccelerateSFTTrainer  # noqa: E402
from rlkit_methods.engine_kit import real_tokens, split_microbatches  # noqa: E402

out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
BUDGET = 40
config = walks_setup.config("sft", out, train=dict(seq_length=48, minibatch_tokens=BUDGET, packing=True))
trainer = AccelerateSFTTrainer(config)
samples = ["ab", "c", "de", "f"] * 2 if rank == 0 else ["abcdefghijklmnopqrst", "bcdefghijklmnopqrstu"] * 4
trainer.make_experience(samples, 48)
items = [trainer.store[i] for i in range(len(samples))]
engine, calls, grads = trainer.engine, [], {}
alone = len(split_microbatches(items, None, tokens=[real_tokens(trainer.collate([it])) for it in items], minibatch_tokens=BUDGET))
forward = engine._forward


def counting(*args, **kwargs):
    calls.append(1)
    return forward(*args, **kwargs)


def keep_grads(*args, **kwargs):
    grads["all"] = torch.cat([p.grad.flatten() for p in engine.model.parameters() if p.grad is not None])


engine._forward, engine.opt.step = counting, keep_grads
engine.step("tokens", items, trainer.collate, trainer.loss)
torch.save({"alone": alone, "ran": len(calls), "grad": grads["all"]}, out / f"rank_{rank}.pt")
