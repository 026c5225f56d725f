"""Entry point of rlkit-nemo: the ``nemo`` backend and its trainers (trlX's names).

Trainers are import strings and their modules import NeMo and megatron-core only when a
trainer is built, so the plugin loads whether or not NeMo is installed; selecting a trainer
without NeMo is a one-line error saying ``install rlkit-nemo[nemo]``.
"""

from rlkit_core import BackendSpec, TrainerSpec, hookimpl

_T = "rlkit_nemo.trainers"


@hookimpl
def rlkit_register_backends():
    return [
        BackendSpec(
            "nemo",
            trainers=[
                TrainerSpec("NeMoPPOTrainer", f"{_T}.ppo:NeMoPPOTrainer", method="ppo"),
                TrainerSpec("NeMoILQLTrainer", f"{_T}.offline:NeMoILQLTrainer", method="ilql"),
                TrainerSpec("NeMoSFTTrainer", f"{_T}.offline:NeMoSFTTrainer", method="sft"),
            ],
            description="NeMo 2 + megatron-core (tensor/pipeline parallel)",
        )
    ]
