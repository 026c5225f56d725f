"""rlkit-nemo: the Megatron engine and trlX's NeMo trainer names on NeMo 2 / megatron-core
(tensor, pipeline and data parallel).

Importing this package never imports NeMo, megatron-core or torch: the trainers are loaded
on first access, and building one without NeMo says what to install.
"""

from rlkit_nemo.data import ShuffledCyclicSequence
from rlkit_nemo.lightning import megatron_trainer

_TRAINERS = {
    "NeMoPPOTrainer": "rlkit_nemo.trainers",
    "NeMoILQLTrainer": "rlkit_nemo.trainers",
    "NeMoSFTTrainer": "rlkit_nemo.trainers",
    "NeMoRFTTrainer": "rlkit_nemo.trainers",
    "NeMoGRPOTrainer": "rlkit_nemo.trainers",
    "NeMoRLOOTrainer": "rlkit_nemo.trainers",
    "MegatronEngine": "rlkit_nemo.engine",
}

__all__ = ["MegatronEngine", "NeMoGRPOTrainer", "NeMoILQLTrainer", "NeMoPPOTrainer", "NeMoRFTTrainer", "NeMoRLOOTrainer", "NeMoSFTTrainer", "ShuffledCyclicSequence", "megatron_trainer"]


def __getattr__(name):
    if name in _TRAINERS:
        import importlib

        return getattr(importlib.import_module(_TRAINERS[name]), name)
    raise AttributeError(f"module 'rlkit_nemo' has no attribute {name!r}")
