"""rlkit-methods: PPO, ILQL and SFT as pure torch — configs, losses, stores, pipelines, rewards.

The root imports no torch: configs, default configs and KL controllers are torch-free; the
math (``rlkit_methods.ppo.losses``, ``rlkit_methods.ilql.losses``, ...) imports torch.
"""

from rlkit_methods.common.kl import AdaptiveKLController, FixedKLController
from rlkit_methods.ilql.config import ILQLConfig, default_ilql_config
from rlkit_methods.ppo.config import PPOConfig, default_ppo_config
from rlkit_methods.sft.config import SFTConfig, default_sft_config

__all__ = [
    "AdaptiveKLController",
    "FixedKLController",
    "ILQLConfig",
    "PPOConfig",
    "SFTConfig",
    "default_ilql_config",
    "default_ppo_config",
    "default_sft_config",
]
