"""rlkit-nemo: trainers on NeMo 2 / megatron-core (tensor and pipeline parallel).

Importing this package never imports NeMo or megatron-core.
"""

from rlkit_nemo.data import ShuffledCyclicSequence

__all__ = ["ShuffledCyclicSequence"]
