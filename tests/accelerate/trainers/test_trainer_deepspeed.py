"""DeepSpeed ZeRO-2 and ZeRO-3 under accelerate, on CPU in one process: the same two optimizer
steps (in two micro-batches each) give the same weights as without DeepSpeed, ILQL's target-Q
sync reaches ZeRO-3's partitioned heads, PPO generates from ZeRO-3's gathered weights, and a
ZeRO-3 config with zero3_init_flag is a clear error. (Several CPU processes under DeepSpeed
are not usable with accelerate; examples/accelerate/gpu_smoke.sh runs the configs on GPUs.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

SCRIPT = Path(__file__).with_name("deepspeed_walks.py")


def run(method, out, zero_stage=None, init_flag=False, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env["OMP_NUM_THREADS"] = "1"
    if zero_stage is not None:  # what `accelerate launch --config_file examples/accelerate/zeroN.yaml` sets
        env.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE=str(zero_stage),
                   ACCELERATE_DEEPSPEED_ZERO3_INIT=str(init_flag).lower(), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(31500 + os.getpid() % 1000 + 10 * zero_stage))
    out.mkdir(parents=True, exist_ok=True)
    if zero_stage == 3:
        # DeepSpeed keeps parameters under 1e5 elements whole ("persistent"): a tiny model would
        # then never be partitioned. Partition every one, as a real model's would be.
        config_file = out / "ds_zero3.json"
        config_file.write_text(json.dumps({
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
            "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
        }))
        env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(config_file)
    result = subprocess.run([sys.executable, str(SCRIPT), method, str(out), *args], capture_output=True, text=True, timeout=600, env=env)
    return result


def trained(method, out, zero_stage=None):
    result = run(method, out, zero_stage)
    assert result.returncode == 0, result.stderr[-4000:]
    saved = torch.load(out / "trained.pt")
    assert saved["steps"] == 2
    assert ("DEEPSPEED" in saved["engine"]) == (zero_stage is not None)
    return saved["weights"]


def assert_same_weights(a, b):
    assert set(a) == set(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


def test_zero2_and_zero3_train_like_plain_accelerate(tmp_path):
    plain = trained("sft", tmp_path / "plain")
    assert_same_weights(plain, trained("sft", tmp_path / "zero2", zero_stage=2))
    assert_same_weights(plain, trained("sft", tmp_path / "zero3", zero_stage=3))


def test_ilql_target_sync_updates_zero3_partitions(tmp_path):
    plain = trained("ilql", tmp_path / "plain")
    zero3 = trained("ilql", tmp_path / "zero3", zero_stage=3)
    target = [k for k in plain if "target_q_heads" in k]
    online = {k: k.replace("target_q_heads", "q_heads") for k in target}
    assert target and any(not torch.equal(plain[k], plain[online[k]]) for k in target)
    assert_same_weights(plain, zero3)  # a silently skipped sync would leave zero3's targets behind


def test_ppo_under_zero3_generates_and_exports(tmp_path):
    weights = trained("ppo", tmp_path, zero_stage=3)
    assert any(k.startswith("v_head.") for k in weights)
    export = tmp_path / "ckpts" / "checkpoint_2" / "hf_model"
    from safetensors.torch import load_file

    saved = load_file(export / "model.safetensors")
    assert saved and all(torch.equal(v.float(), weights[f"base_model.{k}"]) for k, v in saved.items())


def test_zero3_weight_updates_hold_the_whole_gathered_weights(tmp_path):
    """What a generator with its own weights (vLLM) receives under ZeRO-3, where each parameter
    is a shard outside a gather: every weight whole at the first sync, then after each step the
    trainable ones, equal to the trained model's (a generator that records the updates)."""
    result = run("ppo", tmp_path, 3, False, "recorded")
    assert result.returncode == 0, result.stderr[-4000:]
    saved = torch.load(tmp_path / "trained.pt")
    assert "DEEPSPEED" in saved["engine"] and saved["steps"] == 2
    updates = saved["updates"]
    assert [(version, full) for version, full, _ in updates] == [(0, True), (1, False), (2, False)]
    model = {k.removeprefix("base_model."): v for k, v in saved["weights"].items() if k.startswith("base_model.")}
    first, last = updates[0][2], updates[-1][2]
    assert set(first) <= set(model) and set(model) - set(first) <= {"lm_head.weight"}, set(model) ^ set(first)  # tied
    for name, tensor in first.items():
        assert tensor.shape == model[name].shape and tensor.numel() > 0, (name, tensor.shape)
    assert last and set(last) <= set(first)
    for name, tensor in last.items():
        assert torch.equal(tensor.float(), model[name]), name


def test_zero3_init_flag_is_a_clear_error(tmp_path):
    result = run("sft", tmp_path, zero_stage=3, init_flag=True)
    assert result.returncode != 0
    assert "deepspeed zero3_init_flag: rlkit builds the model whole" in result.stderr
    assert not (tmp_path / "ckpts").exists()
