"""The reward this plugin adds: how often the outputs use some keywords."""

from __future__ import annotations

from typing import Callable, Sequence


def keyword_count(keywords: Sequence[str] = ("great",), case_sensitive: bool = False, cap: int | None = None) -> Callable:
    """Reward factory, selected with ``reward: {name: keyword_count, kwargs: {keywords: [...]}}``.

    The reward of a sample is the number of keyword occurrences in its output (at most
    ``cap`` when given). trlX passes ``samples``, ``prompts``, ``outputs`` and extras.
    """
    if isinstance(keywords, str) or not keywords:
        raise ValueError("keyword_count: keywords must be a non-empty list of strings")
    words = list(keywords) if case_sensitive else [k.lower() for k in keywords]

    def reward_fn(samples, prompts=None, outputs=None, **kwargs) -> list[float]:
        texts = outputs if outputs is not None else samples
        scores = []
        for text in texts:
            text = text if case_sensitive else text.lower()
            count = sum(text.count(word) for word in words)
            scores.append(float(min(count, cap) if cap is not None else count))
        return scores

    return reward_fn
