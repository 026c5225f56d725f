"""Built-in rewards and metrics (torch-free), plus :func:`check_scores` for backends."""

from rlkit_methods.common.validate import check_scores
from rlkit_methods.rewards.python import load_function, python_function
from rlkit_methods.rewards.randomwalks import RandomWalks, random_walks, randomwalks_metric, randomwalks_reward
from rlkit_methods.rewards.vader import vader_metric, vader_reward

__all__ = [
    "RandomWalks",
    "check_scores",
    "load_function",
    "python_function",
    "random_walks",
    "randomwalks_metric",
    "randomwalks_reward",
    "vader_metric",
    "vader_reward",
]
