"""rlkit-methods: PPO, ILQL, SFT, RFT, GRPO and RLOO as pure torch — configs, losses, stores, pipelines, rewards.

The root imports no torch: configs, default configs and KL controllers are torch-free; the
math (``rlkit_methods.ppo.losses``, ``rlkit_methods.ilql.losses``, ...) imports torch. The
names below load on first use, so loading the plugin (``rlkit --help``) stays light.
"""

from importlib import import_module

_LAZY = {
    "AdaptiveKLController": "rlkit_methods.common.kl",
    "FixedKLController": "rlkit_methods.common.kl",
    "GRPOConfig": "rlkit_methods.grpo.config",
    "default_grpo_config": "rlkit_methods.grpo.config",
    "ILQLConfig": "rlkit_methods.ilql.config",
    "default_ilql_config": "rlkit_methods.ilql.config",
    "PPOConfig": "rlkit_methods.ppo.config",
    "RLOOConfig": "rlkit_methods.grpo.config",
    "default_rloo_config": "rlkit_methods.grpo.config",
    "default_ppo_config": "rlkit_methods.ppo.config",
    "RFTConfig": "rlkit_methods.rft.config",
    "default_rft_config": "rlkit_methods.rft.config",
    "SFTConfig": "rlkit_methods.sft.config",
    "default_sft_config": "rlkit_methods.sft.config",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlkit_methods' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
