"""PPO's advantages are computed once per rollout phase and whitened over all of its rollouts:
every micro-batch of the phase trains on the same advantages whatever the engine's split
(PPOTrainer.collate used to whiten each collated batch on its own)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import walks_setup
from rlkit_accelerate.trainers import AcceleratePPOTrainer
from rlkit_methods.common.stats import masked_moments
from rlkit_methods.data.prompts import PromptPipeline
from rlkit_methods.ppo.losses import gae_advantages_and_returns

UNEVEN = Path(__file__).with_name("ppo_uneven_walks.py")


def test_ppo_advantages_are_whitened_over_the_whole_phase_not_per_micro_batch(tmp_path):
    config = walks_setup.config("ppo", tmp_path)
    trainer = AcceleratePPOTrainer(config, reward_fn=walks_setup.reward_fn)
    trainer.add_prompt_pipeline(PromptPipeline(["b", "cd", "efg", "h"] * 4, 6, trainer.tokenizer))
    trainer.make_experience(16)
    store = trainer.store
    whole = trainer.collate([store[i] for i in range(16)])
    mean, var, _ = masked_moments(whole.advantages, whole.response_mask)
    assert abs(mean.item()) < 1e-5 and abs(var.item() - 1) < 1e-3  # whitened over the phase
    # the unwhitened GAE and returns of the same rollouts
    raw, returns = gae_advantages_and_returns(whole.values, whole.rewards, config.method.gamma, config.method.lam,
                                              whole.response_mask)
    torch.testing.assert_close(whole.returns, returns)
    mean_raw, var_raw, _ = masked_moments(raw, whole.response_mask)
    torch.testing.assert_close(whole.advantages, (raw - mean_raw) / (var_raw + 1e-8).sqrt() * whole.response_mask)
    for part in ([0, 1], [5, 9, 12]):  # any micro-batch: the phase's advantages, not its own whitening
        batch = trainer.collate([store[i] for i in part])
        width = batch.advantages.shape[1]
        torch.testing.assert_close(batch.advantages, whole.advantages[part, :width])
        torch.testing.assert_close(batch.returns, whole.returns[part, :width])
    # the checkpoint holds them: a resumed run trains on the same advantages
    from rlkit_methods.run.state import plain

    trainer.load_method_state(plain(trainer.method_state()))
    assert torch.equal(trainer.collate([store[i] for i in range(16)]).advantages, whole.advantages)


@pytest.mark.slow
def test_ppo_on_two_processes_with_different_micro_batch_counts_finishes(tmp_path):
    """Rank 0 runs two micro-batches per step, rank 1 one: the run finishes in step on both
    (with the whitening in collate, rank 0's second micro-batch waited for a sum rank 1 never
    started)."""
    runner = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    result = subprocess.run(
        [runner, "--nproc_per_node", "2", "--master_port", str(29300 + os.getpid() % 200), str(UNEVEN), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    finals = [torch.load(tmp_path / f"final_{rank}.pt") for rank in (0, 1)]
    assert finals[0]["steps"] == finals[1]["steps"] == 8
    assert torch.equal(finals[0]["weights"], finals[1]["weights"])  # DDP kept the replicas identical
