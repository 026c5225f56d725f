"""Shared pieces: KL controllers and input checks (torch-free), statistics (torch)."""

from rlkit_methods.common.kl import AdaptiveKLController, FixedKLController, make_kl_controller
from rlkit_methods.common.validate import check_rewards, check_samples, check_scores

__all__ = [
    "AdaptiveKLController",
    "FixedKLController",
    "check_rewards",
    "check_samples",
    "check_scores",
    "make_kl_controller",
]
