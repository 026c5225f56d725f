"""Run by test_ppo_phase_advantages.py under ``torchrun --nproc_per_node 2`` (gloo, CPU): PPO
where rank 1 trains on half of each batch, so it runs one micro-batch per step where rank 0
runs two. A collective inside the engine's per-micro-batch callbacks (PPO's advantage
whitening in ``collate`` did one) would pair with a different call on the other rank and hang."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from walks_setup import run  # noqa: E402

from rlkit_methods.ppo.trainer import PPOTrainer  # noqa: E402

out = Path(sys.argv[1])
whole_batches = PPOTrainer.train_batches


def uneven_batches(self, epoch, inner):
    batches = whole_batches(self, epoch, inner)
    return [b[: len(b) // 2] for b in batches] if self.engine.process_index == 1 else batches


PPOTrainer.train_batches = uneven_batches
# batch_size 8 in micro-batches of 4: rank 0 runs 2 per step, rank 1 runs 1; 2 rollout phases
overrides = dict(train=dict(total_steps=8, minibatch_size=4, eval_interval=8, checkpoint_interval=8))
trainer = run("ppo", out, config_overrides=overrides)
weights = torch.cat([p.detach().flatten() for p in trainer.unwrapped_model.parameters()])
torch.save({"weights": weights, "steps": trainer.iter_count}, out / f"final_{os.environ['RANK']}.pt")
