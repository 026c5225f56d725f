"""FSDP2 on CPU (torchrun, 2 processes, gloo): generation with ranks running different numbers
of forward passes, gathered export, training with the frozen trunk, and the PPO and ILQL
trainers prepared by accelerate's FSDP2 path (accelerate picks FSDP only on GPUs: a test-only
shim in fsdp_trainer.py switches it on). examples/accelerate/gpu_smoke.sh runs the configs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

HERE = Path(__file__).parent


def torchrun(script, out, port):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    result = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(port + os.getpid() % 1000), str(HERE / script), str(out)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-4000:]


def test_fsdp2_policy_generates_exports_and_trains_like_the_unsharded_one(tmp_path):
    torchrun("fsdp_policy.py", tmp_path, 30500)
    ranks = [torch.load(tmp_path / f"rank_{r}.pt") for r in (0, 1)]
    assert [r["tokens"].shape[1] for r in ranks] == [4 + 3, 4 + 12]
    assert ranks[1]["state_keys"] == []  # the full state is gathered on the main rank only
    assert any(k.startswith("v_head.") for k in ranks[0]["state_keys"])
    diff = torch.load(tmp_path / "export_diff.pt")
    assert diff["logits"] == 0 and diff["values"] == 0
    assert (tmp_path / "export" / "config.json").is_file() and (tmp_path / "export" / "value_head.safetensors").is_file()


def test_ppo_and_ilql_trainers_under_accelerate_fsdp2(tmp_path):
    from safetensors.torch import load_file

    torchrun("fsdp_trainer.py", tmp_path, 32500)
    for method in ("ppo", "ilql"):
        finals = [torch.load(tmp_path / method / f"final_{rank}.pt") for rank in (0, 1)]
        assert [f["steps"] for f in finals] == [4, 4]
        assert finals[0]["model"].startswith("FSDP")  # accelerate sharded it with fully_shard
        assert finals[1]["weights"] == {}  # gathered on the main rank only
        weights = finals[0]["weights"]
        export = load_file(tmp_path / method / "ckpts" / "checkpoint_4" / "hf_model" / "model.safetensors")
        assert export and all(torch.equal(v.float(), weights[f"base_model.{k}"]) for k, v in export.items())
