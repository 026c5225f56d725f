"""Entry point of rlkit-accelerate: the ``accelerate`` backend and its trainers.

Trainers are named by import strings and everything heavy is imported inside functions, so
listing plugins imports neither torch nor transformers.
"""

from rlkit_core import BackendSpec, TrainerSpec, hookimpl

_T = "rlkit_accelerate.trainers"


@hookimpl
def rlkit_register_backends():
    return [
        BackendSpec(
            "accelerate",
            engine="rlkit_accelerate.engine:AccelerateEngine",
            trainers=[
                TrainerSpec("AcceleratePPOTrainer", f"{_T}:AcceleratePPOTrainer", method="ppo"),
                TrainerSpec("AccelerateILQLTrainer", f"{_T}:AccelerateILQLTrainer", method="ilql"),
                TrainerSpec("AccelerateSFTTrainer", f"{_T}:AccelerateSFTTrainer", method="sft"),
                TrainerSpec("AccelerateRFTTrainer", f"{_T}:AccelerateRFTTrainer", method="rft"),
                TrainerSpec("AccelerateGRPOTrainer", f"{_T}:AccelerateGRPOTrainer", method="grpo"),
                TrainerSpec("AccelerateRLOOTrainer", f"{_T}:AccelerateRLOOTrainer", method="rloo"),
            ],
            description="HF transformers + accelerate (DDP, DeepSpeed, FSDP)",
        )
    ]
