"""Name-keyed tables of what plugins provide.

Plugins return frozen spec records from the registration hooks; the host files each record
under its kind and name together with the plugin that provided it. Names are matched
case-insensitively. A name provided twice is an error that names both providers; an unknown
name is an error that lists what is installed (and which plugins failed to load).

Heavy objects (trainer classes, config classes that import torch) are given as import
strings ``"package.module:attribute"`` and imported only when a run needs them, so that
``rlkit --help`` and ``rlkit plugins`` never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, Mapping

import attrs

from rlkit_core.errors import RegistryError
from rlkit_core.pairing import Pairing, trainer_name

Target = Any  # an object, or an import string "module:attribute"


def load_target(target: Target, *, what: str = "object") -> Any:
    """Return ``target`` itself, import it when it is a ``"module:attribute"`` string, or make
    a pair's class (:class:`rlkit_core.pairing.Pairing`)."""
    if isinstance(target, Pairing):
        return target.load()
    if not isinstance(target, str):
        return target
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise RegistryError(f"{what} {target!r}: expected 'module:attribute'")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"{what} {target!r}: cannot import {module_name}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistryError(f"{what} {target!r}: {module_name} has no attribute {attr_path}") from None
    return obj


# --- spec records returned by the registration hooks -------------------------------------


@attrs.frozen
class MethodSpec:
    """An RL method: its config class (the ``method`` section) and its default ``TRLConfig``.

    ``name`` is the short name (``"ppo"``); ``aliases`` are other names that select it in
    ``method.name`` (trlX's class names, e.g. ``"PPOConfig"``). Matching is case-insensitive.
    ``config_class`` is an attrs class (or import string) with a ``name`` field.
    ``default_config`` is a zero-argument callable (or import string) returning a full
    ``TRLConfig``; ``train()`` uses it when no config is given.
    ``mode`` is how ``train()`` feeds it: ``"online"`` (reward_fn + prompts),
    ``"offline"`` (samples + rewards) or ``"supervised"`` (samples).
    ``trainer`` is the method's engine-independent trainer class (or import string), a
    subclass of ``rlkit_methods.loop.trainer.RLTrainer`` constructed with ``engine=``: with it
    the method runs on every backend that gives an ``engine`` (:mod:`rlkit_core.pairing`).
    """

    name: str
    config_class: Target
    mode: str = attrs.field(validator=attrs.validators.in_(("online", "offline", "supervised")))
    aliases: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    default_config: Target | None = None
    description: str = ""
    trainer: Target | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@attrs.frozen
class TrainerSpec:
    """A trainer: the pairing of a method with a backend, registered under a trlX class name.

    ``method`` is the method's short name (``"ppo"``), or None for a trainer registered with
    trlX's ``@register_trainer`` whose method is not declared.
    """

    name: str
    target: Target
    method: str | None = None
    backend: str | None = None
    description: str = ""


def _trainers(value: Iterable[TrainerSpec] | Mapping[str, Target]) -> tuple[TrainerSpec, ...]:
    return tuple(value)


@attrs.frozen
class BackendSpec:
    """An engine (accelerate, nemo, ...).

    ``engine`` is the engine class (or import string) implementing
    :class:`rlkit_core.engine.Engine`. With it, every method that gives a ``trainer`` runs on
    this backend as ``<trainer_prefix><Method>Trainer`` (``AcceleratePPOTrainer``,
    ``NeMoGRPOTrainer``; the prefix defaults to the capitalised name), a class made by
    :mod:`rlkit_core.pairing` with trlX's constructor and the engine's keyword arguments.
    ``requires`` (optional, a callable or import string) is called with
    ``"train.trainer: <Name>"`` before a pair builds anything and raises a one-line error when
    the engine cannot run here (e.g. its library is missing). ``trainers`` are classes written
    by hand for this backend, selected by name before the pairs.
    """

    name: str
    trainers: tuple[TrainerSpec, ...] = attrs.field(default=(), converter=_trainers)
    description: str = ""
    engine: Target | None = None
    trainer_prefix: str | None = None
    requires: Target | None = None


@attrs.frozen
class PipelineSpec:
    """A data pipeline.

    ``kind="prompt"``: trlX's tokenizing pipeline class, constructed as
    ``target(prompts, max_prompt_length, tokenizer, **kwargs)`` (``train.pipeline``).
    ``kind="source"``: where data comes from, called as ``target(**kwargs)`` and returning a
    list of prompts or samples (``data.prompts``, ``data.samples`` in a config). A sample
    given as ``{"sample": ..., "reward": ...}`` carries its reward.
    """

    name: str
    target: Target
    kind: str = attrs.field(default="source", validator=attrs.validators.in_(("prompt", "source")))
    description: str = ""


@attrs.frozen
class RewardSpec:
    """A reward or metric factory: ``target(**kwargs)`` returns the function trlX expects,
    ``fn(samples, prompts, outputs, **extra) -> list[float]`` for a reward and
    ``-> dict[str, list[float]]`` for a metric."""

    name: str
    target: Target
    kind: str = attrs.field(default="reward", validator=attrs.validators.in_(("reward", "metric")))
    description: str = ""


@attrs.frozen
class GeneratorSpec:
    """A generator (``train.generator: <name>``, :mod:`rlkit_core.generator`): ``factory`` is
    called as ``factory(engine, **train.generator_kwargs)`` and returns a
    :class:`rlkit_core.generator.Generator`."""

    name: str
    factory: Target
    description: str = ""


KINDS = ("method", "backend", "trainer", "pipeline", "reward", "generator")


@attrs.frozen
class Entry:
    spec: Any
    provider: str  # "plugin-name (distribution version)"


# --- the tables ----------------------------------------------------------------------------


class Registry:
    """Tables of specs by kind and lower-cased name, each remembering its provider."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
        # plugins that failed to load, for "what is installed" hints: name -> one-line error
        self.failed: dict[str, str] = {}
        # (kind, lower-cased name) -> error, for names provided by two plugins
        self.conflicts: dict[tuple[str, str], str] = {}

    # adding ----------------------------------------------------------------------------

    def add(self, kind: str, spec: Any, provider: str) -> None:
        names = spec.names if kind == "method" else (spec.name,)
        table = self._tables[kind]
        for name in names:
            key = name.lower()
            if key in table and table[key].spec != spec:
                # Never pick one by load order: the name stays unusable until one is removed.
                self.conflicts[(kind, key)] = (
                    f"{kind} {name!r} is provided by both {table[key].provider} and {provider}; "
                    f"uninstall one or disable it with RLKIT_DISABLE_PLUGINS"
                )
                continue
            table[key] = Entry(spec, provider)
        if kind == "backend":
            for trainer in spec.trainers:
                trainer = attrs.evolve(trainer, backend=trainer.backend or spec.name)
                self.add("trainer", trainer, provider)

    # looking up ------------------------------------------------------------------------

    def entries(self, kind: str) -> list[Entry]:
        """Unique entries of a kind (aliases collapsed), in registration order; trainers end
        with the method x engine pairs no registered trainer's name shadows."""
        seen: list[Entry] = []
        for entry in self._tables[kind].values():
            if all(entry.spec is not other.spec for other in seen):
                seen.append(entry)
        if kind == "trainer":
            seen += [e for e in self.pairings() if e.spec.name.lower() not in self._tables["trainer"]]
        return seen

    def pairings(self) -> list[Entry]:
        """A trainer for every method that gives a ``trainer`` on every backend that gives an
        ``engine`` (:mod:`rlkit_core.pairing`), provided by the backend's plugin."""
        return [entry for entry, _ in self._pairs()]

    def _pairs(self) -> list[tuple[Entry, set[str]]]:
        """(entry, the lower-cased names that select it): trlX's name, and the backend's name
        followed by any of the method's names (``accelerateppoconfigtrainer`` too)."""
        methods = [e.spec for e in self.entries("method") if e.spec.trainer is not None]
        pairs = []
        for backend in self.entries("backend"):
            if backend.spec.engine is None:
                continue
            for method in methods:
                name = trainer_name(backend.spec, method)
                target = Pairing(name, method.trainer, backend.spec.engine, backend.spec.requires)
                entry = Entry(TrainerSpec(name, target, method=method.name, backend=backend.spec.name), backend.provider)
                pairs.append((entry, {name.lower()} | {f"{backend.spec.name}{m}trainer".lower() for m in method.names}))
        return pairs

    def names(self, kind: str, *, where: Callable[[Any], bool] | None = None) -> list[str]:
        return sorted(e.spec.name for e in self.entries(kind) if where is None or where(e.spec))

    def find(self, kind: str, name: str) -> Any | None:
        if (kind, name.lower()) in self.conflicts:
            raise RegistryError(self.conflicts[(kind, name.lower())])
        entry = self._tables[kind].get(name.lower()) or self._pairing(kind, name)
        return None if entry is None else entry.spec

    def _pairing(self, kind: str, name: str) -> Entry | None:
        if kind != "trainer" or not name.lower().endswith("trainer"):
            return None
        return next((entry for entry, names in self._pairs() if name.lower() in names), None)

    def provider(self, kind: str, name: str) -> str | None:
        entry = self._tables[kind].get(name.lower()) or self._pairing(kind, name)
        return None if entry is None else entry.provider

    def get(self, kind: str, name: str, *, where: Callable[[Any], bool] | None = None) -> Any:
        """The spec called ``name``, or a RegistryError listing what is installed."""
        spec = self.find(kind, name)
        if spec is None or (where is not None and not where(spec)):
            raise RegistryError(self.unknown_message(kind, name, where=where))
        return spec

    def unknown_message(self, kind: str, name: str, *, where: Callable[[Any], bool] | None = None) -> str:
        installed = ", ".join(self.names(kind, where=where)) or "none"
        message = f"unknown {kind} {name!r}; installed: {installed}"
        if self.failed:
            broken = "; ".join(f"plugin {p!r} failed to load ({err})" for p, err in self.failed.items())
            message += f"; {broken}"
        return message

    def provided_by(self, provider_name: str) -> dict[str, list[str]]:
        """What one plugin provides, by kind (for ``rlkit plugins``)."""
        out: dict[str, list[str]] = {}
        for kind in KINDS:
            names = [e.spec.name for e in self.entries(kind) if e.provider.split(" ")[0] == provider_name]
            if names:
                out[kind] = sorted(names)
        return out
