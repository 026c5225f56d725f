"""rlkit-nemo: trainers on NeMo 2 / megatron-core (tensor and pipeline parallel)."""
