"""rlkit-nemo: trainers on NeMo 2 / megatron-core (tensor and pipeline parallel).

Importing this package never imports NeMo, megatron-core or torch: what needs them imports
them when called, and says what to install when they are missing.
"""

from rlkit_nemo.data import ShuffledCyclicSequence
from rlkit_nemo.lightning import megatron_trainer

__all__ = ["ShuffledCyclicSequence", "megatron_trainer"]
