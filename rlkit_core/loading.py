"""trlX's ``trlx.utils.loading``: a trainer or pipeline class by its registered name.

Names are looked up, case-insensitively, in the registry the installed plugins fill (and
``register_trainer`` / ``register_datapipeline`` add to); an unknown name is a
``RegistryError`` that lists what is installed.
"""

from __future__ import annotations

from typing import Any, Callable


def _registry(registry: Any):
    if registry is not None:
        return registry
    from rlkit_core.plugins import get_registry

    return get_registry()


def get_trainer(name: str, *, registry: Any = None) -> Callable[..., Any]:
    """The trainer class registered as ``name`` (e.g. ``"AcceleratePPOTrainer"``)."""
    from rlkit_core.registry import load_target

    spec = _registry(registry).get("trainer", name)
    return load_target(spec.target, what=f"trainer {spec.name!r}")


def get_pipeline(name: str, *, registry: Any = None) -> Callable[..., Any]:
    """The pipeline class or source function registered as ``name`` (e.g. ``"PromptPipeline"``)."""
    from rlkit_core.registry import load_target

    spec = _registry(registry).get("pipeline", name)
    return load_target(spec.target, what=f"pipeline {spec.name!r}")
