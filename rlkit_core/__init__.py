"""rlkit: reinforcement learning for language models, as a small core plus plugins.

The core holds the hook specs, the plugin host and registry, the config schema, ``train()``
and the ``rlkit`` command line. Methods (``rlkit-methods``) and backends
(``rlkit-accelerate``, ``rlkit-nemo``) are plugins found through the entry-point group
``rlkit``. Nothing here imports torch at module level.
"""

import os as _os
import sys as _sys
from importlib import import_module

# ``python -m rlkit_core`` puts the current folder first on sys.path (``rlkit`` does not): a
# ``*.dist-info`` or a ``yaml.py`` there would be imported as a plugin or a dependency, code
# the user never asked to run. While ``-m`` finds this package, argv[0] is "-m".
if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] in ("", _os.getcwd()) and \
        _os.path.abspath(_sys.path[0] or ".") not in _os.environ.get("PYTHONPATH", "").split(_os.pathsep):
    del _sys.path[0]

from rlkit_core.errors import ConfigError, PluginError, RegistryError, RlkitError

# The rest loads on first use (PEP 562), so ``rlkit --help`` and plugins that only need
# ``hookimpl`` do not pay for the config schema, attrs, cattrs and yaml.
_LAZY = {
    "train": "rlkit_core.api",
    "TRLConfig": "rlkit_core.config",
    "load_config": "rlkit_core.config",
    "hookspec": "rlkit_core.hookspecs",
    "get_host": "rlkit_core.plugins",
    "get_registry": "rlkit_core.plugins",
    "hookimpl": "rlkit_core.plugins",
    "register_datapipeline": "rlkit_core.plugins",
    "register_method": "rlkit_core.plugins",
    "register_trainer": "rlkit_core.plugins",
    "BackendSpec": "rlkit_core.registry",
    "MethodSpec": "rlkit_core.registry",
    "PipelineSpec": "rlkit_core.registry",
    "RewardSpec": "rlkit_core.registry",
    "GeneratorSpec": "rlkit_core.registry",
    "TrainerSpec": "rlkit_core.registry",
    "train_from_config": "rlkit_core.run",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'rlkit_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "BackendSpec",
    "ConfigError",
    "MethodSpec",
    "PipelineSpec",
    "PluginError",
    "RegistryError",
    "RewardSpec",
    "GeneratorSpec",
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
