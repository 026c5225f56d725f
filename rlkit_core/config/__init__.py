"""Config: trlX's ``TRLConfig`` schema, strict validation, overrides and YAML I/O."""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from rlkit_core.config.validators import (
    at_least,
    finite,
    in_closed_interval,
    in_open_interval,
    non_negative,
    one_of,
    positive,
)
from rlkit_core.config.converter import expand_shorthands
from rlkit_core.config.overrides import apply_sets, deep_merge, parse_set, parse_sets, unflatten
from rlkit_core.config.schema import (
    ComponentConfig,
    DataConfig,
    MethodConfig,
    ModelConfig,
    OptimizerConfig,
    SchedulerConfig,
    SourceConfig,
    TokenizerConfig,
    TrainConfig,
)
from rlkit_core.config.trl_config import TRLConfig, read_yaml


def load_config(
    path: str | os.PathLike,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    *,
    registry: Any = None,
) -> TRLConfig:
    """Read a YAML config, apply overrides to the raw dict, then validate.

    ``overrides`` is a mapping with dotted or nested keys (deep-merged, as ``update``), or
    ``--set`` strings: ``"k=v"`` (a mapping value replaces the node) and ``"~k"`` (delete it).
    """
    raw = read_yaml(path)
    if overrides:
        if isinstance(overrides, Mapping):
            raw = deep_merge(expand_shorthands(raw), unflatten(overrides))
        else:
            raw = apply_sets(raw, overrides)
    return TRLConfig.from_dict(raw, registry=registry)


__all__ = [
    "apply_sets",
    "ComponentConfig",
    "DataConfig",
    "MethodConfig",
    "ModelConfig",
    "OptimizerConfig",
    "SchedulerConfig",
    "SourceConfig",
    "TRLConfig",
    "TokenizerConfig",
    "TrainConfig",
    "at_least",
    "deep_merge",
    "finite",
    "in_closed_interval",
    "in_open_interval",
    "load_config",
    "non_negative",
    "one_of",
    "parse_set",
    "parse_sets",
    "positive",
    "read_yaml",
    "unflatten",
]
