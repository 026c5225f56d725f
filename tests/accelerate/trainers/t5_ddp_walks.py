"""Run by test_trainer_seq2seq.py under ``torchrun --nproc_per_node 2`` (gloo, CPU): a method
on the tiny T5 walks; each rank saves its final weights for the test to compare."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from t5_walks_setup import run  # noqa: E402

method, out = sys.argv[1], Path(sys.argv[2])
trainer = run(method, out, config_overrides=dict(train=dict(total_steps=4, eval_interval=4, checkpoint_interval=4)))
weights = torch.cat([p.detach().flatten() for p in trainer.unwrapped_model.parameters()])
stats = trainer.evaluate()  # Q-guided decoding on both ranks, scored on the main process
torch.save({"weights": weights, "steps": trainer.iter_count, "eval": stats}, out / f"final_{os.environ['RANK']}.pt")
