"""The data source this plugin adds: prompts from a list, optionally prefixed and repeated."""

from __future__ import annotations

from typing import Sequence

DEFAULT_PROMPTS = ("The movie was", "I thought the acting", "The ending felt", "Overall, the film")


def lines(items: Sequence[str] | None = None, prefix: str = "", repeat: int = 1) -> list[str]:
    """Source pipeline, selected with ``data: {prompts: {pipeline: lines, kwargs: {...}}}``."""
    if repeat < 1:
        raise ValueError(f"lines: repeat must be >= 1, got {repeat}")
    base = list(items) if items is not None else list(DEFAULT_PROMPTS)
    if not base:
        raise ValueError("lines: items is empty; give at least one prompt")
    return [prefix + item for item in base] * repeat
