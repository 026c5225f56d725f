"""Field checks for config classes, and the pass that runs them all at once.

Each check is an attrs validator that raises ``ValueError("<field>: must be ..., got ...")``.
When a whole config is structured, validators are switched off and :func:`collect_errors`
runs them afterwards over the tree, so every problem of a config is reported together with
its dotted path. Direct construction (``attrs.evolve``) still validates at once.

Method plugins use the same checks for their config classes.
"""

from __future__ import annotations

import math
from typing import Any

import attrs


def _fail(attribute: attrs.Attribute, rule: str, value: Any):
    raise ValueError(f"{attribute.name}: must be {rule}, got {value!r}")


def _number_check(rule: str, ok):
    def check(instance, attribute, value):
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            _fail(attribute, rule, value)

    check.rule = rule
    return check


positive = _number_check("> 0", lambda v: v > 0)
non_negative = _number_check(">= 0", lambda v: v >= 0)
finite = _number_check("a finite number", lambda v: math.isfinite(v))


def at_least(low: float):
    return _number_check(f">= {low}", lambda v: v >= low)


def in_open_interval(low: float, high: float):
    return _number_check(f"in ({low}, {high})", lambda v: low < v < high)


def in_closed_interval(low: float, high: float):
    return _number_check(f"in [{low}, {high}]", lambda v: low <= v <= high)


def one_of(*allowed: Any):
    def check(instance, attribute, value):
        if value not in allowed:
            _fail(attribute, "one of " + ", ".join(repr(a) for a in allowed), value)

    return check


def file_suffix(suffixes: tuple[str, ...]):
    def check(instance, attribute, value):
        if value is not None and not str(value).lower().endswith(suffixes):
            _fail(attribute, "a file ending in " + ", ".join(suffixes), value)

    return check


def module_attribute(instance, attribute, value):
    module, sep, name = str(value).partition(":") if value is not None else ("x", ":", "x")
    if not (module and sep and name):
        _fail(attribute, "'module:function'", value)


def exactly_one(instance: Any, *names: str) -> None:
    """Cross-field check: exactly one of ``names`` is set (skipped while structuring)."""
    if attrs.validators.get_disabled():
        return
    given = [n for n in names if getattr(instance, n) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {', '.join(names)}" + (f" (got {', '.join(given)})" if given else ""))


def collect_errors(obj: Any, path: str = "") -> list[str]:
    """Run every field validator and cross-field check below ``obj``; one line per problem."""
    errors: list[str] = []
    if not attrs.has(type(obj)):
        return errors
    prefix = f"{path}." if path else ""
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if field.validator is not None:
            try:
                field.validator(obj, field, value)
            except (ValueError, TypeError) as exc:
                message = str(exc)
                head = f"{field.name}: "
                errors.append(f"{prefix}{field.name}: {message[len(head):] if message.startswith(head) else message}")
        errors.extend(collect_errors(value, f"{prefix}{field.name}"))
    post_init = getattr(obj, "__attrs_post_init__", None)
    if post_init is not None:
        try:
            post_init()
        except (ValueError, TypeError) as exc:
            message = str(exc)
            # a message that starts with "<field>: " gets the full path
            field_names = {f.name for f in attrs.fields(type(obj))}
            head, sep, rest = message.partition(": ")
            if sep and head in field_names:
                errors.append(f"{prefix}{head}: {rest}")
            else:
                errors.append(f"{path or '<config>'}: {message}")
    return errors
