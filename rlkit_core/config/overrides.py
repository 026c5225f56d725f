"""Dotted-key overrides (``--set train.batch_size=8``, ``update({"method.gamma": 0.9})``) and
deep merging, applied to the raw dict before validation so mistakes get the same errors.

``--set`` strings follow Hydra's conventions: ``KEY=VALUE`` assigns, and a mapping value
replaces the whole node (``data.prompts={pipeline: dataset, kwargs: {...}}`` drops the old
``kwargs``); ``~KEY`` deletes a node. Python mappings (``update``, ``evolve``) deep-merge as
in trlX."""

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


def apply_sets(raw: Mapping[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """``raw`` with the ``--set`` strings applied in order: assign, replace a node, or ``~delete``."""
    from rlkit_core.config.converter import expand_shorthands

    out = expand_shorthands(copy.deepcopy(dict(raw)))
    for item in items:
        if item.startswith("~"):
            key = item[1:].strip()
            if not key or "=" in key:
                raise ConfigError(f"--set {item!r}: expected ~KEY (no value), e.g. --set '~data.eval_prompts'")
            parent, leaf = _parent(out, key, item, create=False)
            if parent is None or leaf not in parent:
                raise ConfigError(f"--set {item!r}: {key} is not in the config, nothing to delete")
            del parent[leaf]
        else:
            key, value = parse_set(item)
            parent, leaf = _parent(out, key, item, create=True)
            parent[leaf] = copy.deepcopy(value)  # a mapping replaces the node, it is not merged
        # a string shorthand just set (``reward=vader``) becomes a mapping the next item can reach into
        out = expand_shorthands(out)
    return out


def _parent(root: dict[str, Any], key: str, item: str, *, create: bool) -> tuple[Any, str]:
    *parents, leaf = key.split(".")
    node: Any = root
    for i, part in enumerate(parents):
        child = node.get(part)
        if child is None and create:
            child = node[part] = {}
        if child is None:
            return None, leaf
        if not isinstance(child, dict):
            where = ".".join(parents[: i + 1])
            raise ConfigError(
                f"--set {item!r}: {where} is a value ({child!r}), not a section; "
                f"replace it whole: --set '{where}={{...}}'"
            )
        node = child
    return node, leaf


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
