"""Run by test_trainer_deepspeed.py: two optimizer steps of a method on the smoke set-up
(examples/accelerate/smoke.py), under whatever accelerate engine the environment selects;
saves the trained weights, gathered, for comparison across engines. A third argument ``recorded``
samples through rlkit_core.testing.generator.RecordingGenerator and saves the weight updates it
was offered."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[3] / "examples" / "accelerate"))
from smoke import train  # noqa: E402

from rlkit_accelerate.sharding import full_state_dict  # noqa: E402

method, out = sys.argv[1], Path(sys.argv[2])
recorded = sys.argv[3:] == ["recorded"]
generator = dict(generator="rlkit_core.testing.generator:RecordingGenerator") if recorded else {}
trainer = train(method, out, train=dict(total_steps=2, eval_interval=2, checkpoint_interval=2, **generator),
                method=dict(steps_for_target_q_sync=1, alpha=0.5) if method == "ilql" else {})
state = full_state_dict(trainer.model)
if state is None:
    state = trainer.unwrapped_model.state_dict()
if trainer.accelerator.is_main_process:
    torch.save({"engine": str(trainer.accelerator.distributed_type), "steps": trainer.iter_count,
                "weights": {k: v.detach().float().cpu() for k, v in state.items()},
                "updates": trainer.generator.updates if recorded else None}, out / "trained.pt")
