"""RFT (rejection-sampling fine-tuning): config and selection math are torch-free; the store
and trainer import torch."""

from rlkit_methods.rft.config import RFTConfig, default_rft_config

__all__ = ["RFTConfig", "default_rft_config"]
