"""gpu_check.sh's CPU dry run: every phase's logic runs on the CPU (the plugin's CPU mode) and
prints one JSON line; a phase that fails (here one made to, RLKIT_GPU_CHECK_FAIL) is reported
and the phases after it still run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "plugins" / "rlkit_nemo" / "scripts" / "gpu_check.sh"


@pytest.mark.slow  # its methods phase trains PPO, ILQL and SFT (rlkit_core.testing.lanes)
def test_the_dry_run_prints_one_guarded_json_line_per_phase(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", RLKIT_GPU_CHECK_FAIL="environment")
    result = subprocess.run(["bash", str(SCRIPT), "--cpu", str(tmp_path)], capture_output=True, text=True, env=env, timeout=900)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["phase"] for line in lines] == ["install", "environment", "dtype_matrix", "distributed_optimizer", "methods",
                                                 "kv_cache", "te_mask"], result.stdout + result.stderr[-3000:]
    status = {line["phase"]: line for line in lines}
    assert status["environment"]["status"] == "failed" and "injected failure" in status["environment"]["error"]
    assert (tmp_path / "environment.traceback.txt").is_file()
    assert result.returncode == 1  # a phase failed
    for phase in ("install", "dtype_matrix", "distributed_optimizer", "methods", "kv_cache"):
        assert status[phase]["status"] == "ok", (phase, status[phase])
    cells = status["dtype_matrix"]["cells"]
    assert len(cells) == 9 and all(cell["ok"] for cell in cells.values())
    weights = {name.split("/")[1]: cell["weights"] for name, cell in cells.items()}
    assert weights == {"bf16_o2": "torch.bfloat16", "bf16_autocast": "torch.float32", "fp16_o2": "torch.float16"}
    saved = status["distributed_optimizer"]
    assert saved["distributed_optimizer"] is True  # Megatron's, its shard of the fp32 main weights saved and loaded
    assert saved["weights_equal"] and saved["loss_continued"] == saved["loss_reloaded"]
    assert all(status["methods"][m]["steps"] == 2 and status["methods"][m]["weights"] == "torch.bfloat16"
               for m in ("ppo", "ilql", "sft"))
    assert status["kv_cache"]["equal"] is True
    assert status["te_mask"]["status"] == "skipped" and "transformer_engine" in status["te_mask"]["reason"]


def test_an_unknown_option_or_phase_is_one_line(tmp_path):
    bad = subprocess.run(["bash", str(SCRIPT), "--gpu"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--gpu" in bad.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    phase = subprocess.run([sys.executable, str(SCRIPT.with_suffix(".py")), "--cpu", "--phases=dtypes", str(tmp_path)],
                           capture_output=True, text=True, env=env)
    assert phase.returncode == 2 and "unknown phase dtypes" in phase.stderr
