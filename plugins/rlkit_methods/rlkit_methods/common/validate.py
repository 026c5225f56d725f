"""Checks on user data with one-line errors that say what is wrong and how to fix it.

Torch-free: backends call these on plain Python values before building tensors.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence


def _on_meta(value: Any) -> bool:
    """A tensor on torch's meta device has a shape and no values."""
    return getattr(getattr(value, "device", None), "type", None) == "meta"


META = "a tensor on the meta device (a shape with no values); return numbers, or tensors on cpu/cuda"


def _as_float(value: Any, where: str) -> float:
    if _on_meta(value):
        raise ValueError(f"{where} is {META}")
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # 0-d tensor or numpy scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where} is {value!r} ({type(value).__name__}), not a number; return floats")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{where} is {value}; rewards must be finite numbers")
    return value


def _as_list(values: Any) -> list:
    if hasattr(values, "tolist"):  # tensor or numpy array
        return values.tolist()
    return list(values)


def check_scores(scores: Any, n: int, *, what: str = "reward function") -> list:
    """Validate what a reward function returned for ``n`` samples.

    Returns a list with one entry per sample: a float, or a list of floats for per-token
    (dense) scores. Raises ``ValueError`` for a wrong count, a non-number or a NaN/inf.
    """
    if scores is None or isinstance(scores, (str, bytes, dict)):
        raise ValueError(f"{what} returned {type(scores).__name__}; return a list of {n} floats, one per sample")
    if _on_meta(scores):
        raise ValueError(f"{what} returned {META}")
    shape = tuple(getattr(scores, "shape", ()))
    if len(shape) == 2 and shape[1] == 1:
        # a reward model's logits: read as per-token scores, the score would sit on the first token
        raise ValueError(f"{what} returned shape {shape}, as a reward model's logits are; return one score per sample, "
                         f"shape ({n},) (e.g. logits[:, 0]), or per-token scores as one list per sample")
    try:
        items = _as_list(scores)
    except TypeError:
        raise ValueError(f"{what} returned {type(scores).__name__}; return a list of {n} floats, one per sample") from None
    if len(items) != n:
        raise ValueError(f"{what} returned {len(items)} scores for {n} samples; return exactly one score per sample")
    out: list = []
    for i, item in enumerate(items):
        if _on_meta(item):
            raise ValueError(f"{what}: score {i} is {META}")
        if isinstance(item, (list, tuple)) or (hasattr(item, "tolist") and getattr(item, "ndim", 0) > 0):
            dense = _as_list(item)
            if not dense:
                raise ValueError(f"{what}: score {i} is an empty list; give at least one number")
            out.append([_as_float(v, f"{what}: score {i}[{j}]") for j, v in enumerate(dense)])
        else:
            out.append(_as_float(item, f"{what}: score {i}"))
    return out


def check_token_scores(scores: list, lengths: Sequence[int], *, what: str = "reward function") -> None:
    """Per-token (dense) scores hold at most one value per response token: longer ones would
    be cut to the response without a word."""
    for i, (score, length) in enumerate(zip(scores, lengths)):
        if isinstance(score, list) and len(score) > length:
            raise ValueError(f"{what}: score {i} has {len(score)} per-token values for a response of {length} tokens; "
                             f"give at most one per response token (or one number per sample)")


def check_rewards(rewards: Any, n: int) -> list[float]:
    """Rewards given with offline samples: one finite float per sample."""
    if rewards is None:
        raise ValueError("rewards: missing; give one reward per sample")
    items = _as_list(rewards)
    if len(items) != n:
        raise ValueError(f"rewards: got {len(items)} rewards for {n} samples; give one per sample")
    return [_as_float(r, f"rewards[{i}]") for i, r in enumerate(items)]


def check_samples(samples: Any) -> list:
    """Samples are non-empty strings or non-empty ``[prompt, output, ...]`` lists."""
    if samples is None or isinstance(samples, (str, bytes)):
        raise ValueError(f"samples: expected a list of samples, got {type(samples).__name__}")
    samples = list(samples)
    if not samples:
        raise ValueError("samples: the list is empty; give at least one sample")
    for i, sample in enumerate(samples):
        if isinstance(sample, str):
            if not sample:
                raise ValueError(f"samples[{i}]: empty sample; remove it or give some text")
        elif isinstance(sample, Sequence):
            if len(sample) == 0 or all(isinstance(p, str) and not p for p in sample):
                raise ValueError(f"samples[{i}]: empty sample; remove it or give some text")
            if not all(isinstance(p, str) for p in sample):
                raise ValueError(f"samples[{i}]: every part of a dialogue must be a string")
            if len(sample) % 2:
                raise ValueError(
                    f"samples[{i}]: a dialogue needs an even number of parts [prompt, output, ...], got {len(sample)}"
                )
        else:
            raise ValueError(f"samples[{i}]: expected a string or a [prompt, output, ...] list, got {type(sample).__name__}")
    return samples
