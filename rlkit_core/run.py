"""``rlkit run``: a config's ``data``, ``reward`` and ``metric`` sections turned into the
arguments of :func:`rlkit_core.train`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rlkit_core.api import train
from rlkit_core.config import ComponentConfig, SourceConfig, TRLConfig
from rlkit_core.errors import ConfigError, RegistryError
from rlkit_core.plugins import get_host
from rlkit_core.registry import Registry, load_target


def resolve_component(component: ComponentConfig, kind: str, registry: Registry, path: str) -> Callable:
    """A reward or metric function from ``name`` (a registered factory) or ``module:function``."""
    if component.function is not None:
        try:
            fn = load_target(component.function, what=f"{kind} function")
        except RegistryError as exc:
            raise ConfigError(f"{path}.function: {exc}") from None
        if not callable(fn):
            raise ConfigError(f"{path}.function: {component.function} is not callable")
        if component.kwargs:
            return lambda *args, **kw: fn(*args, **{**component.kwargs, **kw})
        return fn
    try:
        spec = registry.get("reward", component.name, where=lambda s: s.kind == kind)
    except RegistryError as exc:
        raise ConfigError(f"{path}.name: {exc}") from None
    factory = load_target(spec.target, what=f"{kind} {spec.name!r}")
    try:
        return factory(**component.kwargs)
    except TypeError as exc:
        raise ConfigError(f"{path}.kwargs: {kind} {spec.name!r} does not accept these arguments: {exc}") from None


def load_source(source: SourceConfig, registry: Registry, path: str) -> list[Any]:
    """Prompts or samples from a registered source pipeline, from a file via ``file``, or the
    config's own ``items``."""
    if source.items is not None:
        return list(source.items)
    kwargs = dict(source.kwargs)
    if source.path is not None:
        if not Path(source.path).is_file():
            raise ConfigError(f"{path}.path: file {source.path!r} not found")
        name, kwargs["path"] = "file", source.path
    else:
        name = source.pipeline
    try:
        spec = registry.get("pipeline", name, where=lambda s: s.kind == "source")
    except RegistryError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    items = load_target(spec.target, what=f"pipeline {spec.name!r}")(**kwargs)
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{path}: pipeline {spec.name!r} returned {type(items).__name__}, expected a list")
    return list(items)


def check_names(config: TRLConfig, registry: Registry) -> None:
    """Every trainer, pipeline, reward and file a config names exists (imports nothing)."""
    errors = []

    def need(kind: str, name: str, path: str, where=None) -> None:
        if registry.find(kind, name) is None or (where and not where(registry.find(kind, name))):
            errors.append(f"{path}: {registry.unknown_message(kind, name, where=where)}")

    need("trainer", config.train.trainer, "train.trainer")
    need("pipeline", config.train.pipeline, "train.pipeline", lambda s: s.kind == "prompt")
    for key in ("prompts", "eval_prompts", "samples"):
        source = getattr(config.data, key)
        if source is not None and source.path is not None and not Path(source.path).is_file():
            errors.append(f"data.{key}.path: file {source.path!r} not found")
        elif source is not None and source.pipeline is not None:
            need("pipeline", source.pipeline, f"data.{key}.pipeline", lambda s: s.kind == "source")
    for key in ("reward", "metric"):
        component = getattr(config, key)
        if component is not None and component.name is not None:
            need("reward", component.name, f"{key}.name", lambda s, kind=key: s.kind == kind)
    if errors:
        raise ConfigError(errors)


def split_samples(items: list[Any]) -> tuple[list[Any], list[float] | None]:
    """``[{"sample": s, "reward": r}, ...]`` -> samples and rewards; other items pass through
    (a dict without ``sample``, such as a preference pair, whole)."""
    if items and all(isinstance(item, dict) and "reward" in item for item in items):
        return [item["sample"] for item in items], [item["reward"] for item in items]
    if any(isinstance(item, dict) and "reward" in item for item in items):
        raise ConfigError("data.samples: some samples carry a reward and some do not; label all or none")
    # a conversation ({"messages": [...]}) passes through whole, for the method to render
    return [item["sample"] if isinstance(item, dict) and "sample" in item else item for item in items], None


def train_from_config(config: TRLConfig, *, plugins=None):
    """What ``rlkit run`` does after loading the config."""
    registry = get_host().registry
    method = registry.get("method", config.method.name)
    kwargs: dict[str, Any] = {"config": config, "plugins": plugins}
    if config.metric is not None:
        kwargs["metric_fn"] = resolve_component(config.metric, "metric", registry, "metric")
    if config.data.eval_prompts is not None:
        kwargs["eval_prompts"] = load_source(config.data.eval_prompts, registry, "data.eval_prompts")
    if method.mode == "online":
        if config.reward is None:
            raise ConfigError(f"reward: required for {method.name} (online training); e.g. reward: vader")
        kwargs["reward_fn"] = resolve_component(config.reward, "reward", registry, "reward")
        if config.data.prompts is not None:
            kwargs["prompts"] = load_source(config.data.prompts, registry, "data.prompts")
    else:
        if config.data.samples is None:
            raise ConfigError(f"data.samples: required for {method.name} ({method.mode} training)")
        samples, rewards = split_samples(load_source(config.data.samples, registry, "data.samples"))
        if method.mode == "offline" and rewards is None:
            raise ConfigError(f"data.samples: {method.name} needs a reward per sample ({{sample: ..., reward: ...}})")
        kwargs["samples"] = samples
        if method.mode == "offline":
            kwargs["rewards"] = rewards
    return train(**kwargs)
