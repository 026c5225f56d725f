"""VADER sentiment (Hutto & Gilbert 2014) from ``vaderSentiment``: the compound score in
[-1, 1] of each output (or of each whole sample with ``on="samples"``)."""

from __future__ import annotations

import functools
from typing import Callable


@functools.lru_cache(maxsize=1)
def _analyzer():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def _texts(on: str, samples, outputs):
    if on == "outputs" and outputs is not None:
        return outputs
    return samples


def vader_reward(on: str = "outputs") -> Callable[..., list[float]]:
    """Reward factory (``reward: vader``): compound sentiment of each output."""
    if on not in ("outputs", "samples"):
        raise ValueError(f"on: must be 'outputs' or 'samples', got {on!r}")

    def reward_fn(samples, prompts=None, outputs=None, **kwargs) -> list[float]:
        analyzer = _analyzer()
        return [float(analyzer.polarity_scores(t)["compound"]) for t in _texts(on, samples, outputs)]

    return reward_fn


def vader_metric(on: str = "outputs") -> Callable[..., dict[str, list[float]]]:
    """Metric factory (``metric: sentiment``): ``{"sentiment": [compound, ...]}``."""
    reward_fn = vader_reward(on)

    def metric_fn(samples, prompts=None, outputs=None, **kwargs) -> dict[str, list[float]]:
        return {"sentiment": reward_fn(samples, prompts, outputs)}

    return metric_fn
