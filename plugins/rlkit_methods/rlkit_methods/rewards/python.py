"""A reward or metric given as a Python ``module:function`` (``reward: {name: python,
kwargs: {function: "my_pkg.rewards:score", ...}}``); extra kwargs are bound to every call."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def load_function(function: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` (dots after the colon walk attributes)."""
    module_name, sep, attr = str(function).partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"function: expected 'module:function', got {function!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"function {function!r}: cannot import {module_name}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"function {function!r}: {module_name} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"function {function!r} is not callable")
    return obj


def python_function(function: str, **bound: Any) -> Callable[..., Any]:
    """Factory: the function named by ``function``, with ``bound`` kwargs added to each call."""
    fn = load_function(function)
    if not bound:
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{**bound, **kwargs})

    call.__name__ = getattr(fn, "__name__", "reward_fn")
    return call
