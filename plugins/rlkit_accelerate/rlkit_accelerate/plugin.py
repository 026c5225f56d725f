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
            trainers=[
                TrainerSpec("AcceleratePPOTrainer", f"{_T}.ppo:AcceleratePPOTrainer", method="ppo"),
                TrainerSpec("AccelerateILQLTrainer", f"{_T}.ilql:AccelerateILQLTrainer", method="ilql"),
                TrainerSpec("AccelerateSFTTrainer", f"{_T}.sft:AccelerateSFTTrainer", method="sft"),
            ],
            description="HF transformers + accelerate (DDP, DeepSpeed, FSDP)",
        )
    ]
