"""GRPO and RLOO (TRL 1.16's semantics): configs are torch-free; losses, store and trainers
import torch (``rlkit_methods.grpo.losses``, ``.store``, ``.trainer``)."""

from rlkit_methods.grpo.config import GRPOConfig, RLOOConfig, default_grpo_config, default_rloo_config

__all__ = ["GRPOConfig", "RLOOConfig", "default_grpo_config", "default_rloo_config"]
