"""transformers 5.24 renamed the model outputs' ``past_key_values`` to ``cache`` (the old name
stays, as a deprecated property and keyword). rlkit's trlX-style output classes declare, and
its reads and model calls use, whichever name the installed transformers has, so nothing
warns or loses the cache (``ModelOutput.get("past_key_values")`` finds nothing under 5.24)."""

from __future__ import annotations

from typing import Any

from transformers.utils import ModelOutput

RENAMED = isinstance(getattr(ModelOutput, "past_key_values", None), property)
CACHE_FIELD = "cache" if RENAMED else "past_key_values"


def output_cache(out: Any) -> Any:
    """The key/value cache of a model output, None if it holds none."""
    return out.get(CACHE_FIELD) if isinstance(out, dict) else getattr(out, CACHE_FIELD, None)
