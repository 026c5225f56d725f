"""Where a run's CPU time went, from its metrics log: the sampling (rollouts and evaluation), the
rollout forward and scoring per the ``cpu/...`` keys the online trainers log, and the rest of
the process's CPU time (training, checkpoints, start-up) given the total. With
``--sampler-speedup X`` it also says what the run would cost with sampling X times faster and
nothing else changed (Amdahl): the most a faster generator can save.

    python bench/phase_cpu.py RUN_DIR --total-cpu SECONDS [--sampler-speedup 2.5]

RUN_DIR is the run's ``checkpoint_dir`` (or its ``logs`` folder); the total is the process's
user + system seconds (``/usr/bin/time``'s figures, or ``rlkit run``'s under ``time``).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

from rlkit_methods.run.end_report import logs_dir
from rlkit_methods.run.metrics_log import read_metrics

PARTS = {"rollout sampling": ("cpu/rollout_generate",), "evaluation sampling": ("cpu/generate",),
         "rollout forward": ("cpu/rollout_forward",), "rollout scoring": ("cpu/rollout_score",)}
SAMPLING = ("rollout sampling", "evaluation sampling")


def phase_seconds(records: list[dict[str, Any]]) -> dict[str, float]:
    """CPU seconds per part over the run (an evaluation sweep's ``cpu/generate@...`` keys count)."""
    seconds: dict[str, float] = defaultdict(float)
    for record in records:
        for part, prefixes in PARTS.items():
            seconds[part] += sum(float(v) for k, v in record.items() if k.startswith(prefixes))
    return dict(seconds)


def amdahl(seconds: dict[str, float], total: float, speedup: float) -> float:
    """The run's CPU seconds with its sampling ``speedup`` times faster, the rest unchanged."""
    sampling = sum(seconds.get(part, 0.0) for part in SAMPLING)
    if sampling > total:
        raise SystemExit(f"phase_cpu: the log's sampling ({sampling:.1f} CPU s) exceeds --total-cpu {total:.1f}: "
                         f"pass the whole run's CPU seconds")
    return total - sampling + sampling / speedup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--total-cpu", type=float, required=True, help="the process's user + system seconds")
    parser.add_argument("--sampler-speedup", type=float, default=None)
    args = parser.parse_args()
    seconds = phase_seconds(read_metrics(logs_dir(Path(args.run_dir))))
    seconds["rest (training, checkpoints, start)"] = args.total_cpu - sum(seconds.values())
    for part, value in seconds.items():
        print(f"{part:>36}: {value:8.1f} CPU s  {value / args.total_cpu:6.1%}")
    print(f"{'total':>36}: {args.total_cpu:8.1f} CPU s")
    if args.sampler_speedup:
        bound = amdahl(seconds, args.total_cpu, args.sampler_speedup)
        print(f"with sampling {args.sampler_speedup:g}x faster: {bound:.1f} CPU s, {bound / args.total_cpu:.2f}x the run's")


if __name__ == "__main__":
    main()
