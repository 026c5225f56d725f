"""One cattrs converter for every config class, with errors that name their path.

Config classes are structured field by field so that one pass finds every problem: unknown
keys (with the closest valid key), missing keys, wrong types and range checks, each reported
as one line ``<dotted.path>: <problem>``. Leaf types (int, float, bool, str, Optional, lists,
dicts) are structured strictly: ``"abc"`` is not an int and ``1.5`` is not silently truncated.
"""

from __future__ import annotations

import contextvars
import difflib
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    IterableValidationError,
    IterableValidationNote,
)

from rlkit_core.config.schema import FILE_SUFFIXES, ComponentConfig, MethodConfig, SourceConfig
from rlkit_core.errors import RegistryError

# the registry that resolves ``method.name`` while a config is being structured
current_registry: contextvars.ContextVar[Any] = contextvars.ContextVar("rlkit_registry", default=None)


class StructureErrors(Exception):
    """Problems found below one node; ``lines`` are ``(relative path, message)`` pairs."""

    def __init__(self, lines: list[tuple[str, str]]):
        self.lines = lines
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in lines))


def _join(*parts: str) -> str:
    out = ""
    for part in parts:
        if not part:
            continue
        out = part if not out else (out + part if part.startswith("[") else f"{out}.{part}")
    return out


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- strict leaves -------------------------------------------------------------------------


def _structure_int(value: Any, _type: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_describe(value)}")
    return value


def _structure_float(value: Any, _type: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(f"expected a number, got {_describe(value)}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # YAML reads "1e-4" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    raise TypeError(f"expected a number, got {_describe(value)}")


def _structure_bool(value: Any, _type: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {_describe(value)}")
    return value


def _structure_str(value: Any, _type: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {_describe(value)}")
    return value


# --- config classes ----------------------------------------------------------------------


def _leaf_lines(exc: BaseException, path: str = "") -> list[tuple[str, str]]:
    """Flatten an exception from structuring one field into ``(path, message)`` lines."""
    if isinstance(exc, StructureErrors):
        return [(_join(path, p), m) for p, m in exc.lines]
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        lines: list[tuple[str, str]] = []
        with_notes, without_notes = exc.group_exceptions()
        for sub, note in with_notes:
            if isinstance(note, IterableValidationNote):
                lines += _leaf_lines(sub, _join(path, f"[{note.index}]"))
            elif isinstance(note, AttributeValidationNote):
                lines += _leaf_lines(sub, _join(path, note.name))
            else:
                lines += _leaf_lines(sub, path)
        for sub in without_notes:
            lines += _leaf_lines(sub, path)
        return lines
    if isinstance(exc, RegistryError):
        return [(path, str(exc))]
    message = str(exc)
    if isinstance(exc, KeyError):
        message = f"missing key {message}"
    return [(path, message)]


def _suggest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    return "valid keys: " + ", ".join(valid)


def _shorthand(cls: type, value: Any) -> Any:
    if isinstance(value, str) and cls is SourceConfig:
        return {"path": value} if value.lower().endswith(FILE_SUFFIXES) else {"pipeline": value}
    if isinstance(value, list) and cls is SourceConfig:
        return {"items": value}
    if isinstance(value, str) and cls is ComponentConfig:
        return {"function": value} if ":" in value else {"name": value}
    return value


def expand_shorthands(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A raw config with the string shorthands of ``data.*``, ``reward`` and ``metric``
    written out as mappings, so that overrides merge into them (``--set reward.kwargs.x=1``
    on ``reward: vader``)."""
    out = dict(raw)
    if isinstance(out.get("data"), Mapping):
        out["data"] = {k: _shorthand(SourceConfig, v) for k, v in out["data"].items()}
    for key in ("reward", "metric"):
        if key in out:
            out[key] = _shorthand(ComponentConfig, out[key])
    return out


def structure_config_class(converter: cattrs.Converter, cls: type, value: Any) -> Any:
    """Structure ``value`` into the attrs class ``cls``, collecting every problem below it."""
    value = _shorthand(cls, value)
    if not isinstance(value, Mapping):
        raise StructureErrors([("", f"expected a mapping of keys to values, got {_describe(value)}")])
    fields = attrs.fields(cls)
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in fields if f.init]
    lines: list[tuple[str, str]] = []
    for key in value:
        if key not in valid:
            lines.append((str(key), f"unknown key; {_suggest(str(key), valid)}"))
    kwargs: dict[str, Any] = {}
    for field in fields:
        if not field.init:
            continue
        if field.name not in value:
            if field.default is attrs.NOTHING:
                lines.append((field.name, "required key missing"))
            continue
        raw = value[field.name]
        if field.converter is not None:
            # a field's attrs converter reads trlX's other spellings (``scale_reward: false``)
            # from YAML as it does from Python, before the type check
            raw = field.converter(raw)
        try:
            kwargs[field.name] = converter.structure(raw, hints[field.name])
        except Exception as exc:  # collected, reported with the rest
            lines += _leaf_lines(exc, field.name)
            continue
        if field.validator is not None:
            try:
                field.validator(None, field, kwargs[field.name])
            except (ValueError, TypeError) as exc:
                lines.append((field.name, str(exc).partition(": ")[2] or str(exc)))
    if lines:
        raise StructureErrors(lines)
    with attrs.validators.disabled():
        obj = cls(**kwargs)
    # fields were checked above; this adds the cross-field checks (__attrs_post_init__)
    cross = _cross_field_errors(obj)
    if cross:
        raise StructureErrors(cross)
    return obj


def _cross_field_errors(obj: Any) -> list[tuple[str, str]]:
    post_init = getattr(obj, "__attrs_post_init__", None)
    if post_init is None:
        return []
    try:
        post_init()
    except (ValueError, TypeError) as exc:
        # "<field>: problem" is reported at that field's path
        head, sep, rest = str(exc).partition(": ")
        if sep and head in {f.name for f in attrs.fields(type(obj))}:
            return [(head, rest)]
        return [("", str(exc))]
    return []


def _structure_method(converter: cattrs.Converter, value: Any) -> Any:
    """``method`` is tagged by ``name``, resolved (case-insensitively) through the registry."""
    if not isinstance(value, Mapping):
        raise StructureErrors([("", f"expected a mapping of keys to values, got {_describe(value)}")])
    name = value.get("name")
    if name is None:
        raise StructureErrors([("name", "required key missing; name the method, e.g. PPOConfig")])
    if not isinstance(name, str):
        raise StructureErrors([("name", f"expected a string, got {_describe(name)}")])
    registry = current_registry.get()
    if registry is None:
        from rlkit_core.plugins import get_registry

        registry = get_registry()
    try:
        spec = registry.get("method", name)
        from rlkit_core.registry import load_target

        cls = load_target(spec.config_class, what=f"config class of method {spec.name!r}")
    except RegistryError as exc:
        raise StructureErrors([("name", str(exc))]) from None
    return structure_config_class(converter, cls, value)


def make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook_func(
        lambda t: attrs.has(t) and t is not MethodConfig,
        lambda value, t: structure_config_class(converter, t, value),
    )
    converter.register_structure_hook_func(
        lambda t: t is MethodConfig, lambda value, t: _structure_method(converter, value)
    )
    return converter


converter = make_converter()


def to_plain(obj: Any) -> Any:
    """A config as plain dicts and lists (subclass fields of ``method`` included)."""
    if attrs.has(type(obj)):
        return {f.name: to_plain(getattr(obj, f.name)) for f in attrs.fields(type(obj))}
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
