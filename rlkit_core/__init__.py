"""rlkit: reinforcement learning for language models, as a small core plus plugins.

The core holds the hook specs, the plugin host and registry, the config schema, ``train()``
and the ``rlkit`` command line. Methods (``rlkit-methods``) and backends
(``rlkit-accelerate``, ``rlkit-nemo``) are plugins found through the entry-point group
``rlkit``. Nothing here imports torch at module level.
"""

from rlkit_core.api import train
from rlkit_core.config import TRLConfig, load_config
from rlkit_core.errors import ConfigError, PluginError, RegistryError, RlkitError
from rlkit_core.hookspecs import hookspec
from rlkit_core.plugins import (
    get_host,
    get_registry,
    hookimpl,
    register_datapipeline,
    register_method,
    register_trainer,
)
from rlkit_core.registry import BackendSpec, MethodSpec, PipelineSpec, RewardSpec, TrainerSpec
from rlkit_core.run import train_from_config

__version__ = "0.1.0"

__all__ = [
    "BackendSpec",
    "ConfigError",
    "MethodSpec",
    "PipelineSpec",
    "PluginError",
    "RegistryError",
    "RewardSpec",
    "RlkitError",
    "TRLConfig",
    "TrainerSpec",
    "get_host",
    "get_registry",
    "hookimpl",
    "hookspec",
    "load_config",
    "register_datapipeline",
    "register_method",
    "register_trainer",
    "train",
    "train_from_config",
]
