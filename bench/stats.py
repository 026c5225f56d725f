"""Summaries of repeated measurements: median, spread and the ratio against the peer.

Stdlib only: the runner imports it without torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    median: float
    low: float  # min
    high: float  # max
    q1: float
    q3: float
    n: int

    def spread(self, digits: int = 2) -> str:
        """``min-max`` (and the IQR once there are enough runs for quartiles to mean something)."""
        text = f"{self.low:.{digits}f}-{self.high:.{digits}f}"
        if self.n >= 4:
            text += f" (IQR {self.q1:.{digits}f}-{self.q3:.{digits}f})"
        return text


def summarize(values: list[float]) -> Summary:
    if not values:
        raise ValueError("summarize: no measurements (every run of this side failed?)")
    ordered = sorted(float(v) for v in values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return Summary(statistics.median(ordered), ordered[0], ordered[-1], q1, q3, len(ordered))


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation / sqrt(n)); SE is NaN for one value."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def speedup(ours: float, peer: float, higher_is_better: bool) -> float:
    """How many times better rlkit is: ``peer / ours`` for a time, ``ours / peer`` for a
    throughput. > 1 means rlkit is ahead."""
    if ours <= 0 or peer <= 0:
        raise ValueError(f"speedup: measurements must be positive, got ours={ours}, peer={peer}")
    return ours / peer if higher_is_better else peer / ours


def interleaved(sides: list[str], repeats: int) -> list[tuple[int, str]]:
    """The run order ``A B C A B C ...``: every side once per repetition, so drift in the
    machine's load is shared by all sides instead of landing on one of them."""
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    return [(r, side) for r in range(repeats) for side in sides]
