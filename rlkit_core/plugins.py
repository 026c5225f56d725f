"""The plugin host: finds plugins, loads each on its own, and builds the registry.

Plugins come from four places:

* entry points in the group ``rlkit`` (how installed distributions, ours included, plug in);
* one-off plugin files (``rlkit run --plugin my_plugin.py``);
* trlX's decorators ``register_trainer`` / ``register_method`` / ``register_datapipeline``
  used in the running program (the ``in-process`` plugin);
* objects passed to ``rlkit_core.train(..., plugins=[obj])``, registered for that run only.

A plugin that fails to import is recorded with its error and skipped; the run fails only
if it needs something that plugin would have provided. That includes a plugin that calls
``sys.exit`` or raises ``KeyboardInterrupt`` at import, and one whose import runs past
``RLKIT_PLUGIN_IMPORT_TIMEOUT`` seconds (:mod:`rlkit_core.deadline` says what can be bounded).
``RLKIT_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point or distribution name.

A lifecycle hook that raises is reported as a :class:`PluginError` naming the plugin and the
hook; a registration hook that returns something other than a list of spec records marks
its plugin failed, with the plugin named.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Iterable

import attrs
import pluggy

from rlkit_core import hookspecs
from rlkit_core.deadline import UserInterrupt, call_with_deadline, import_timeout
from rlkit_core.errors import PluginError
from rlkit_core.plugin_isolation import _import_failure, _one_line, plugin_code
from rlkit_core.registry import (
    BackendSpec,
    GeneratorSpec,
    MethodSpec,
    PipelineSpec,
    Registry,
    RewardSpec,
    TrainerSpec,
)

hookimpl = pluggy.HookimplMarker("rlkit")

ENTRY_POINT_GROUP = "rlkit"
DISABLE_ENV = "RLKIT_DISABLE_PLUGINS"


@attrs.define
class PluginStatus:
    """What ``rlkit plugins`` shows for one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    source: str = "entry point"  # "entry point" | "file" | "in-process" | "run"
    status: str = "loaded"  # "loaded" | "failed" | "blocked"
    error: str | None = None
    provides: dict[str, list[str]] = attrs.Factory(dict)

    @property
    def label(self) -> str:
        if self.distribution:
            return f"{self.name} ({self.distribution} {self.version})"
        return f"{self.name} ({self.source})"


SPEC_TYPES = {"method": MethodSpec, "backend": BackendSpec, "pipeline": PipelineSpec, "reward": RewardSpec,
              "generator": GeneratorSpec}


def disabled_names() -> set[str]:
    raw = os.environ.get(DISABLE_ENV, "")
    return {name.strip().lower() for name in raw.split(",") if name.strip()}


class _InProcessPlugin:
    """Holds what trlX-style decorators register in the running program."""

    def __init__(self) -> None:
        self.methods: list[MethodSpec] = []
        self.trainers: list[TrainerSpec] = []
        self.pipelines: list[PipelineSpec] = []

    @hookimpl
    def rlkit_register_methods(self):
        return list(self.methods)

    @hookimpl
    def rlkit_register_backends(self):
        from rlkit_core.registry import BackendSpec

        return [BackendSpec("in-process", trainers=self.trainers)] if self.trainers else []

    @hookimpl
    def rlkit_register_pipelines(self):
        return list(self.pipelines)


IN_PROCESS = _InProcessPlugin()


class PluginHost:
    """A pluggy manager for the project ``rlkit`` plus the status of every plugin."""

    def __init__(self, *, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager("rlkit")
        self.pm.add_hookspecs(hookspecs)
        self.statuses: dict[str, PluginStatus] = {}
        self._registry: Registry | None = None
        self._register(IN_PROCESS, PluginStatus("in-process", source="in-process"))
        if load_entry_points:
            self.load_entry_points()

    @property
    def hook(self):
        return self.pm.hook

    # loading ---------------------------------------------------------------------------

    def load_entry_points(self, entry_points: Iterable[Any] | None = None) -> None:
        """Load every entry point of the group ``rlkit``, each on its own."""
        if entry_points is None:
            entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        blocked = disabled_names()
        deadline = import_timeout()
        for ep in entry_points:
            if ep.name in self.statuses:
                continue  # the same distribution seen twice on sys.path
            dist = getattr(ep, "dist", None)
            status = PluginStatus(
                ep.name,
                distribution=dist.name if dist else None,
                version=dist.version if dist else None,
            )
            if ep.name.lower() in blocked or (status.distribution or "").lower() in blocked:
                status.status = "blocked"
                status.error = f"disabled by {DISABLE_ENV}"
                self.statuses[ep.name] = status
                continue
            try:
                with plugin_code():
                    plugin = call_with_deadline(ep.load, deadline)
            except UserInterrupt:
                raise  # the user's Ctrl-C, not the plugin's fault
            except BaseException as exc:  # any import-time failure is the plugin's, exits included
                status.status, status.error = "failed", _import_failure(exc)
                self.statuses[ep.name] = status
                continue
            self._register(plugin, status)

    def load_file(self, path: str | os.PathLike) -> None:
        """Load a one-off plugin file (``--plugin path.py``); errors are fatal: it was asked for."""
        path = Path(path)
        if not path.is_file():
            raise PluginError(f"plugin file {str(path)!r} not found; pass the path of a .py file")
        module_name = f"rlkit_plugin_file_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise PluginError(f"plugin file {str(path)!r} is not a Python module; pass a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            with plugin_code():
                call_with_deadline(lambda: spec.loader.exec_module(module), import_timeout())
        except UserInterrupt:
            sys.modules.pop(module_name, None)
            raise
        except BaseException as exc:  # exits and interrupts included: it was asked for, so fatal
            sys.modules.pop(module_name, None)
            raise PluginError(f"plugin file {str(path)!r} failed to import: {_import_failure(exc)}") from exc
        self._register(module, PluginStatus(path.stem, source="file"))
        self.registry  # noqa: B018 - its registration hooks run now: returning garbage is as fatal as failing to import
        if self.statuses[path.stem].status == "failed":
            raise PluginError(f"plugin file {str(path)!r}: {self.statuses[path.stem].error}")

    def register(self, plugin: Any, name: str | None = None, *, source: str = "run") -> str:
        """Register an object or module for this process (e.g. ``train(plugins=[...])``)."""
        name = name or f"{type(plugin).__name__}-{id(plugin):x}"
        self._register(plugin, PluginStatus(name, source=source))
        if self.statuses[name].status == "failed":
            raise PluginError(f"plugin {name!r}: {self.statuses[name].error}")
        return name

    def unregister(self, name: str) -> None:
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin, name=name)
        self.statuses.pop(name, None)
        self.invalidate()

    def _register(self, plugin: Any, status: PluginStatus) -> None:
        try:
            self.pm.register(plugin, name=status.name)
        except Exception as exc:  # wrong hook signatures, a duplicate
            status.status, status.error = "failed", _one_line(exc)
        else:
            try:
                self.pm.check_pending()  # a misspelled hook name would otherwise never run
            except pluggy.PluginValidationError as exc:
                self.pm.unregister(name=status.name)
                status.status, status.error = "failed", _one_line(exc)
            else:
                _name_lifecycle_failures(self.pm, plugin, status.name)
        self.statuses[status.name] = status
        self.invalidate()

    def command_hook_failed(self, name: str, exc: BaseException) -> None:
        """Record that a plugin's ``rlkit_register_commands`` raised (its commands are left out)."""
        status = self.statuses.get(name) or PluginStatus(name)
        status.error = f"commands not added: rlkit_register_commands raised {_one_line(exc)}"
        self.statuses[name] = status

    # the registry ----------------------------------------------------------------------

    def invalidate(self) -> None:
        self._registry = None

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = self._build_registry()
        return self._registry

    def _build_registry(self) -> Registry:
        registry = Registry()
        for name, status in self.statuses.items():
            if status.status == "failed":
                registry.failed[name] = status.error or "unknown error"
        collected: dict[str, list[tuple[str, Any]]] = {}
        failed: set[str] = set()
        for hook_name, kind in hookspecs.REGISTRATION_HOOKS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin_name in failed:
                    continue
                try:
                    with plugin_code():
                        result = impl.function()
                except Exception as exc:
                    self._mark_failed(impl.plugin_name, f"{hook_name} raised {_one_line(exc)}", registry)
                    failed.add(impl.plugin_name)
                    continue
                try:
                    specs = _as_spec_list(result, hook_name)
                except TypeError as exc:
                    self._mark_failed(impl.plugin_name, f"{hook_name} {exc}", registry)
                    failed.add(impl.plugin_name)
                    continue
                collected.setdefault(impl.plugin_name, []).extend((kind, spec) for spec in specs)
        for plugin_name, items in collected.items():
            if plugin_name in failed:
                continue
            provider = self.statuses[plugin_name].label
            for kind, spec in items:
                registry.add(kind, spec, provider)
        for status in self.statuses.values():
            status.provides = registry.provided_by(status.name)
        return registry

    def _mark_failed(self, name: str, error: str, registry: Registry) -> None:
        status = self.statuses[name]
        status.status, status.error = "failed", error
        registry.failed[name] = error


def _as_spec_list(result: Any, hook_name: str) -> list[Any]:
    if result is None:
        return []
    expected = SPEC_TYPES[hookspecs.REGISTRATION_HOOKS[hook_name]].__name__
    if not isinstance(result, (list, tuple)):
        raise TypeError(f"must return a list of {expected} records, got {_short(result)}")
    for item in result:
        if not isinstance(item, SPEC_TYPES[hookspecs.REGISTRATION_HOOKS[hook_name]]):
            raise TypeError(f"must return a list of {expected} records, got an item {_short(item)}")
    return list(result)


def _short(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


LIFECYCLE_HOOKS = frozenset(
    name for name in dir(hookspecs) if name.startswith("rlkit_") and name not in hookspecs.REGISTRATION_HOOKS
) - {"rlkit_register_commands"}


def _name_lifecycle_failures(pm: pluggy.PluginManager, plugin: Any, name: str) -> None:
    """Wrap the plugin's lifecycle hooks so that an error raised in one names the plugin."""
    for caller in pm.get_hookcallers(plugin) or []:
        if caller.name not in LIFECYCLE_HOOKS:
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and not (impl.hookwrapper or impl.wrapper):
                impl.function = _naming(impl.function, name, caller.name)


def _naming(function, plugin_name: str, hook_name: str):
    def call(*args):
        try:
            return function(*args)
        except (Exception, SystemExit) as exc:  # a hook's sys.exit(0) must not end a run as a success
            if isinstance(exc, PluginError) and getattr(exc, "plugin", None) == plugin_name:
                raise
            what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {_one_line(exc)}"
            error = PluginError(f"plugin {plugin_name!r}: {hook_name} {what}")
            error.plugin = plugin_name
            raise error from exc

    call.__wrapped__ = function
    return call


# --- the process-wide host -------------------------------------------------------------------

_HOST: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide plugin host, created (and entry points loaded) on first use."""
    global _HOST
    if _HOST is None:
        _HOST = PluginHost()
    return _HOST


def set_host(host: PluginHost | None) -> PluginHost | None:
    """Replace the process-wide host (tests); returns the previous one. None resets it."""
    global _HOST
    previous, _HOST = _HOST, host
    return previous


def get_registry() -> Registry:
    return get_host().registry


# --- trlX's decorators, on top of the same registry -------------------------------------------


def _decorator(name_or_obj, make_spec):
    def decorate(obj, name=None):
        make_spec(obj, name or obj.__name__)
        if _HOST is not None:
            _HOST.invalidate()
        return obj

    if isinstance(name_or_obj, str):
        return lambda obj: decorate(obj, name_or_obj)
    return decorate(name_or_obj)


def register_trainer(name_or_cls):
    """trlX's ``@register_trainer``: select the class with ``train.trainer: <ClassName>``."""

    def add(cls, name):
        method = getattr(cls, "method_name", None)
        IN_PROCESS.trainers.append(TrainerSpec(name, cls, method=method, backend="in-process"))

    return _decorator(name_or_cls, add)


def register_method(name_or_cls):
    """trlX's ``@register_method`` on a method config class: ``method.name: <ClassName>``.

    The class may set ``mode = "online" | "offline" | "supervised"`` (default online).
    """

    def add(cls, name):
        mode = getattr(cls, "mode", "online")
        IN_PROCESS.methods.append(MethodSpec(name, cls, mode=mode))

    return _decorator(name_or_cls, add)


def register_datapipeline(name_or_cls):
    """trlX's ``@register_datapipeline`` on a prompt pipeline class: ``train.pipeline``."""

    def add(cls, name):
        IN_PROCESS.pipelines.append(PipelineSpec(name, cls, kind="prompt"))

    return _decorator(name_or_cls, add)
