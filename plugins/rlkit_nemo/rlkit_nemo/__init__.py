"""rlkit-nemo: the Megatron engine and trlX's NeMo trainer names on NeMo 2 / megatron-core
(tensor, pipeline and data parallel).

Importing this package never imports NeMo, megatron-core or torch: the names below load on
first access, trlX's (``NeMoPPOTrainer``, ``megatron_trainer``, ...) from their compat modules,
and building a trainer without NeMo says what to install.
"""

from rlkit_nemo.data import ShuffledCyclicSequence

_LAZY = {
    "MegatronEngine": "rlkit_nemo.engine",
    "megatron_trainer": "rlkit_nemo.lightning",
}

__all__ = ["MegatronEngine", "NeMoGRPOTrainer", "NeMoILQLTrainer", "NeMoPPOTrainer", "NeMoRFTTrainer", "NeMoRLOOTrainer", "NeMoSFTTrainer", "ShuffledCyclicSequence", "megatron_trainer"]


def __getattr__(name):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name.startswith("NeMo") and name.endswith("Trainer"):  # every installed method's pair (rlkit_core.pairing)
        return getattr(importlib.import_module("rlkit_nemo.trainers"), name)
    raise AttributeError(f"module 'rlkit_nemo' has no attribute {name!r}")
