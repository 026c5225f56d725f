"""Two processes on CPU (torchrun, gloo): PPO and ILQL train in sync, the reward function
runs on the main process once per sample."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

SCRIPT = Path(__file__).with_name("ddp_walks.py")


def torchrun(method, out):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(29500 + os.getpid() % 1000), str(SCRIPT), method, str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # the engine destroys gloo's group at exit: left to finalisation it can abort a finished run
    assert all(f"rank {rank}: process group left at exit: False" in result.stdout for rank in (0, 1)), result.stdout[-2000:]
    finals = [torch.load(out / f"final_{rank}.pt") for rank in (0, 1)]
    assert finals[0]["steps"] == finals[1]["steps"] == 4
    assert torch.equal(finals[0]["weights"], finals[1]["weights"])  # DDP kept the replicas identical
    return finals


def test_ppo_on_two_processes_scores_each_sample_once_on_the_main_process(tmp_path):
    torchrun("ppo", tmp_path)
    calls = [json.loads(line) for line in (tmp_path / "reward_calls.jsonl").read_text().splitlines()]
    assert {c["rank"] for c in calls} == {0}
    # two rollout chunks of 8 prompts on each of 2 processes, then 8 eval prompts at steps 0 and 4
    assert [c["n"] for c in calls] == [16, 16, 8, 8]


def test_ppo_with_lora_on_two_processes(tmp_path):
    torchrun("ppo_lora", tmp_path)
    assert (tmp_path / "ckpts" / "checkpoint_4" / "hf_model" / "adapter_config.json").is_file()
    calls = [json.loads(line) for line in (tmp_path / "reward_calls.jsonl").read_text().splitlines()]
    assert {c["rank"] for c in calls} == {0} and sum(c["n"] for c in calls) == 48


def test_ilql_on_two_processes(tmp_path):
    torchrun("ilql", tmp_path)
    assert (tmp_path / "ckpts" / "checkpoint_4" / "loop_state_1.pt").is_file()


def test_a_raising_reward_stops_both_processes_with_its_name(tmp_path):
    """The reward runs on the main process only; its error reaches the other rank instead of
    leaving it waiting in the broadcast."""
    runner = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    result = subprocess.run(
        [runner, "--nproc_per_node", "2", "--master_port", str(29700 + os.getpid() % 200), str(SCRIPT), "ppo_raising", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode != 0
    assert result.stderr.count("reward function raising_reward failed at step 0: ValueError: boom") >= 2, result.stderr[-3000:]
