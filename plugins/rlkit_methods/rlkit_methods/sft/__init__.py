"""SFT: config (torch-free); store and loss import torch."""

from rlkit_methods.sft.config import SFTConfig, default_sft_config

__all__ = ["SFTConfig", "default_sft_config"]
