"""RFT's selection math, as pure functions (numpy only).

For epoch ``e`` with ``n = n_improve_steps`` and improve step ``k = e mod n``::

    growth step        k == 0: sample n_generations_per_prompt new outputs per prompt
    percentile  p_k  = start + (end - start) * k / (n - 1)          (p_0 = start when n == 1)
    threshold   t_j  = quantile(scores of prompt j, p_k)            (linear interpolation)
    clip               t_j <- min(max(t_j, min_i t_i + 1e-3), max_i t_i - 1e-3)
    keep               (prompt j, output) with score >= t_j, each pair once

The clip is trlX's rule for quantized rewards: across prompts, the lowest threshold is raised
just above itself (samples scoring exactly the lowest threshold drop out) and the highest is
lowered just below itself (samples scoring the highest threshold stay in).

trlX stepped by ``(end - start) / n``, so its last improve step used
``start + (end - start) (n - 1) / n`` and never reached ``end_percentile``; here the last step
uses ``end_percentile`` as its documentation says (the same schedule when ``n == 1``).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

EPSILON = 1e-3  # trlX's margin for quantized rewards


def is_growth_step(epoch: int, n_improve_steps: int) -> bool:
    """Whether new samples are generated at this epoch (the first of each growth step)."""
    return epoch % n_improve_steps == 0


def percentile_at(epoch: int, start: float, end: float, n_improve_steps: int) -> float:
    """p_k = start + (end - start) * k / (n - 1), k = epoch mod n (start when n == 1)."""
    if n_improve_steps < 1:
        raise ValueError(f"n_improve_steps: must be >= 1, got {n_improve_steps}")
    k = epoch % n_improve_steps
    if n_improve_steps == 1:
        return start
    return start + (end - start) * k / (n_improve_steps - 1)


def score_thresholds(scores_per_prompt: Sequence[Sequence[float]], percentile: float) -> np.ndarray:
    """One threshold per prompt: the prompt's score quantile, clipped across prompts (module doc)."""
    if not scores_per_prompt or any(len(s) == 0 for s in scores_per_prompt):
        raise ValueError("score_thresholds: every prompt needs at least one scored sample")
    if not 0 <= percentile <= 1:
        raise ValueError(f"percentile: must be in [0, 1], got {percentile}")
    thresholds = np.array([np.quantile(np.asarray(s, dtype=np.float64), percentile) for s in scores_per_prompt])  # (P,)
    low, high = thresholds.min() + EPSILON, thresholds.max() - EPSILON
    return np.minimum(np.maximum(thresholds, low), high)


def add_generations(pool: dict[str, list[tuple[str, float]]], prompts: Iterable[str], outputs: Iterable[str],
                    scores: Iterable[float]) -> dict[str, list[tuple[str, float]]]:
    """Add scored samples to the per-prompt pool (kept across growth steps, as in trlX)."""
    for prompt, output, score in zip(prompts, outputs, scores, strict=True):
        score = float(score)
        if not np.isfinite(score):
            raise ValueError(f"reward_fn: scores must be finite numbers, got {score} for prompt {prompt!r}")
        pool.setdefault(prompt, []).append((output, score))
    return pool


def select_samples(pool: Mapping[str, Sequence[tuple[str, float]]], percentile: float) -> tuple[list[list[str]], np.ndarray]:
    """``[prompt, output]`` pairs scoring at least their prompt's threshold, each once, in the
    order first seen (trlX deduplicated through a set, in an order that changed between runs);
    and the thresholds, one per prompt in ``pool`` order."""
    prompts = list(pool)
    thresholds = score_thresholds([[score for _, score in pool[p]] for p in prompts], percentile)
    selected, seen = [], set()
    for prompt, threshold in zip(prompts, thresholds):
        for output, score in pool[prompt]:
            if score >= threshold and (prompt, output) not in seen:
                seen.add((prompt, output))
                selected.append([prompt, output])
    return selected, thresholds
