"""Run by test_trainer_ddp.py under ``torchrun --nproc_per_node 2`` (gloo, CPU)."""

import atexit
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from walks_setup import reward_fn, run  # noqa: E402

method, out = sys.argv[1], Path(sys.argv[2])
# registered before the engine's own exit handler, so it runs after it (atexit: last in, first out)
atexit.register(lambda: print(f"rank {os.environ['RANK']}: process group left at exit: {dist.is_initialized()}", flush=True))
calls = out / "reward_calls.jsonl"


def counting_reward(samples, **kwargs):
    with open(calls, "a") as handle:
        handle.write(json.dumps({"rank": int(os.environ["RANK"]), "n": len(samples)}) + "\n")
    return reward_fn(samples)


def raising_reward(samples, **kwargs):
    raise ValueError("boom")


kwargs = {"reward_fn": counting_reward} if method.startswith("ppo") else {}
if method == "ppo_raising":  # the main process's scoring error must reach the other rank
    method, kwargs = "ppo", {"reward_fn": raising_reward}
overrides = dict(train=dict(total_steps=4, eval_interval=4, checkpoint_interval=4))
if method.endswith("_lora"):
    method = method.removesuffix("_lora")
    overrides["model"] = dict(peft_config={"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["c_attn"], "fan_in_fan_out": True})
trainer = run(method, out, config_overrides=overrides, **kwargs)
weights = torch.cat([p.detach().flatten() for p in trainer.unwrapped_model.parameters()])
torch.save({"weights": weights, "steps": trainer.iter_count}, out / f"final_{os.environ['RANK']}.pt")
