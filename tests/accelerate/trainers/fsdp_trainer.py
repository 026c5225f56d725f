"""Run by test_trainer_fsdp.py under torchrun (2 CPU processes, gloo): PPO and ILQL trainers
prepared by accelerate's FSDP2 path. accelerate selects FSDP only on GPUs, so this test-only
shim switches the freshly made Accelerator's state to FSDP before the trainer prepares."""

import os
import sys
from pathlib import Path

import accelerate
import torch
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

import rlkit_accelerate.engine as engine

sys.path.insert(0, str(Path(__file__).parent))
from walks_setup import run  # noqa: E402

from rlkit_accelerate.sharding import full_state_dict  # noqa: E402


class FSDPOnCPU(accelerate.Accelerator):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state.distributed_type = DistributedType.FSDP
        self.state.fsdp_plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, auto_wrap_policy="transformer_based_wrap", state_dict_type="SHARDED_STATE_DICT",
            reshard_after_forward=True, cpu_ram_efficient_loading=False)


engine.Accelerator = FSDPOnCPU
out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
for method in ("ppo", "ilql"):
    overrides = dict(train=dict(total_steps=4, eval_interval=4, checkpoint_interval=4, minibatch_size=4))
    trainer = run(method, out / method, config_overrides=overrides)
    state = full_state_dict(trainer.model)
    weights = {k: v.float() for k, v in state.items()} if state is not None else None
    torch.save({"steps": trainer.iter_count, "model": type(trainer.model).__name__, "weights": weights},
               out / method / f"final_{rank}.pt")
    trainer.accelerator.wait_for_everyone()
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
