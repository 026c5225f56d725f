"""Values rlkit-methods can refuse before a model is loaded (part of ``rlkit_check_config``):
generation settings transformers would accept and sample wrongly with, or fail on after the
model is loaded (``top_p: 2`` trained), and an inline model whose shape transformers only
refuses when it builds the weights (``n_head`` not dividing ``n_embd``) or that is shorter
than ``train.seq_length``."""

from __future__ import annotations

import math
from typing import Any

MAX_BEAMS = 1024  # sequences per prompt in one generate: more fits no device


def _num(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


def generation_values(path: str, kwargs: dict[str, Any]) -> list[str]:
    errors = []

    def bad(key: str, rule: str) -> None:
        errors.append(f"{path}.{key}: must be {rule}, got {kwargs[key]!r}")

    def values(key: str) -> list[Any]:
        value = kwargs[key]
        return value if isinstance(value, list) else [value]  # a list sweeps evaluation over values

    if "top_p" in kwargs and any((v := _num(x)) is None or not 0 < v <= 1 for x in values("top_p")):
        bad("top_p", "a number in (0, 1] (the probability mass kept)")
    def whole(x: Any, low: int, high: float = math.inf) -> bool:  # trlX's configs write top_k: 0.0
        v = _num(x)
        return v is not None and math.isfinite(v) and v == int(v) and low <= v <= high

    if "top_k" in kwargs and not all(whole(x, 0) for x in values("top_k")):
        bad("top_k", "a whole number >= 0 (0 keeps every token)")
    if "temperature" in kwargs and any((v := _num(x)) is None or not (math.isfinite(v) and v > 0) for x in values("temperature")):
        bad("temperature", "a finite number > 0")
    if "repetition_penalty" in kwargs and any((v := _num(x)) is None or not (math.isfinite(v) and v > 0) for x in values("repetition_penalty")):
        bad("repetition_penalty", "a finite number > 0 (1.0 is none)")
    for key in ("num_beams", "num_return_sequences"):
        if key in kwargs and not all(whole(x, 1, MAX_BEAMS) for x in values(key)):
            bad(key, f"a whole number in 1 .. {MAX_BEAMS}")
    return errors


def inline_model_shape(config: Any) -> list[str]:
    """An inline ``model.model_path`` mapping: heads divide the width, positions cover seq_length."""
    fields = config.model.model_path
    if not isinstance(fields, dict):
        return []
    from transformers import AutoConfig

    fields = dict(fields)
    try:
        built = AutoConfig.for_model(fields.pop("model_type"), **fields)
    except Exception:  # noqa: BLE001 - unknown types and fields are model_path_fields' lines
        return []
    errors = []
    width, heads = getattr(built, "hidden_size", None), getattr(built, "num_attention_heads", None)
    if isinstance(width, int) and isinstance(heads, int) and heads > 0 and width % heads:
        errors.append(f"model.model_path: {heads} attention heads do not divide the width {width} "
                      f"(n_head / num_attention_heads must divide n_embd / hidden_size); change one of them")
    positions = getattr(built, "max_position_embeddings", None)
    if isinstance(positions, int) and positions < config.train.seq_length:
        errors.append(f"model.model_path: {positions} positions (n_positions / max_position_embeddings) are fewer than "
                      f"train.seq_length {config.train.seq_length}; raise the positions or lower seq_length")
    return errors
