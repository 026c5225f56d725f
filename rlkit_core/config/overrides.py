"""Dotted-key overrides (``--set train.batch_size=8``, ``update({"method.gamma": 0.9})``) and
deep merging, applied to the raw dict before validation so mistakes get the same errors."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Iterable

import yaml

from rlkit_core.errors import ConfigError


def parse_set(item: str) -> tuple[str, Any]:
    """``"train.batch_size=8"`` -> ``("train.batch_size", 8)``; the value is read as YAML."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.batch_size=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw  # not YAML: keep the text, the schema decides whether a string fits
    return key, value


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    return dict(parse_set(item) for item in items)


def unflatten(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": {"d": 2}}`` -> ``{"a": {"b": 1}, "c": {"d": 2}}``."""
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        *parents, leaf = str(key).split(".")
        node = nested
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(parents[: i + 1])}: set both as a value and as a section")
            node = child
        if isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
            node[leaf] = deep_merge(node[leaf], value)
        else:
            node[leaf] = value
    return nested


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in, section by section."""
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
