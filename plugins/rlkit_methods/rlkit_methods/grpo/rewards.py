"""Several reward functions with weights (TRL's ``reward_funcs`` + ``reward_weights``)::

    r_i = sum_k w_k f_k(sample_i)          (w_k = 1 when no weights are given)

Each function is called once per rollout phase on the main process with every rank's
samples, trlX's way (``fn(samples=, prompts=, outputs=, tokenizer=, **metadata)``); an error
names the function and the step. Evaluation scores with :class:`WeightedRewards`, the same sum.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rlkit_core.errors import ConfigError, RlkitError

from rlkit_methods.common.scoring import call_scorer
from rlkit_methods.common.validate import check_scores


def function_name(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def reward_functions(reward_fn: Any, weights: Sequence[float] | None) -> tuple[list[Callable], list[float]]:
    """``reward_fn`` (one callable, or a list of them) and ``method.reward_weights`` -> (functions, weights)."""
    if reward_fn is None:
        return [], []
    fns = list(reward_fn) if isinstance(reward_fn, (list, tuple)) else [reward_fn]
    if not fns:
        raise ConfigError("reward_fn: the list of reward functions is empty; give at least one")
    for fn in fns:
        if not callable(fn):
            raise ConfigError(f"reward_fn: {fn!r} is not callable; give functions fn(samples, prompts, outputs, **kwargs)")
    if weights is None:
        return fns, [1.0] * len(fns)
    if len(weights) != len(fns):
        raise ConfigError(f"method.reward_weights: {len(weights)} weights for {len(fns)} reward functions; give one per function")
    return fns, [float(w) for w in weights]


class WeightedRewards:
    """The weighted sum of several reward functions, as one reward function."""

    def __init__(self, fns: Sequence[Callable], weights: Sequence[float]):
        self.fns, self.weights = list(fns), list(weights)
        self.names = [function_name(fn) for fn in self.fns]
        self.__qualname__ = self.__name__ = "+".join(self.names)  # what errors and logs call it

    def __call__(self, **kwargs) -> list[float]:
        total = None
        for fn, name, weight in zip(self.fns, self.names, self.weights):
            try:
                scores = check_scores(fn(**kwargs), len(kwargs["samples"]), what=f"reward function {name}")
            except Exception as exc:
                raise RuntimeError(f"{name}: {type(exc).__name__}: {exc}") from exc
            values = [weight * _single(s, name) for s in scores]
            total = values if total is None else [a + b for a, b in zip(total, values)]
        return total


def _single(score: Any, name: str) -> float:
    if isinstance(score, list):
        raise RlkitError(f"reward function {name}: GRPO and RLOO take one score per sample, not one per token")
    return float(score)


def score_each(fns: Sequence[Callable], step: int, samples, prompts, outputs, metadata, tokenizer) -> list[list[float]]:
    """Every function on every sample: (N, F) rewards, rows in sample order. Runs on one process."""
    columns = []
    for fn in fns:
        name = function_name(fn)
        scores = call_scorer(fn, "reward", step, samples, prompts, outputs, metadata, tokenizer)
        try:
            scores = check_scores(scores, len(samples), what=f"reward function {name}")
        except ValueError as exc:
            raise RlkitError(f"{exc} (step {step})") from None
        columns.append([_single(s, name) for s in scores])
    return [list(row) for row in zip(*columns)]
