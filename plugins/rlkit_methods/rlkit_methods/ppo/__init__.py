"""PPO: config (torch-free); losses and store import torch (``rlkit_methods.ppo.losses``, ``.store``)."""

from rlkit_methods.ppo.config import PPOConfig, default_ppo_config

__all__ = ["PPOConfig", "default_ppo_config"]
