"""Metrics: a JSONL file that is always written, plus an optional tracker.

One JSON record per line, ``{"step": n, "kind": "train" | "eval" | "rollout", ...metrics}``,
in ``train.logging_dir`` (default: ``<checkpoint_dir>/logs``). Only the main process writes.
``train.tracker`` adds TensorBoard or Weights & Biases through accelerate.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    return value


class MetricsLog:
    def __init__(self, directory: str | Path, *, enabled: bool = True, resume: bool = False) -> None:
        self.path = Path(directory) / METRICS_FILE
        self.enabled = enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not resume and self.path.exists():
                self.path.unlink()

    def write(self, step: int, kind: str, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "kind": kind, "time": round(time.time(), 3)}
        record.update({k: _plain(v) for k, v in metrics.items() if _plain(v) is not None})
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def write_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        """The evaluation's samples (prompt, output, reward...), one record per evaluation."""
        if self.enabled:
            with open(self.path.with_name(SAMPLES_FILE), "a") as handle:
                handle.write(json.dumps({"step": step, "samples": samples}, default=_plain) + "\n")

    def truncate_after(self, step: int) -> None:
        """On resume, drop records past the checkpoint's step so the log reads as one run."""
        for path in (self.path, self.path.with_name(SAMPLES_FILE)):
            if self.enabled and path.exists():
                kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
                path.write_text("".join(line + "\n" for line in kept))


def read_metrics(directory: str | Path, name: str = METRICS_FILE) -> list[dict[str, Any]]:
    path = Path(directory) / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
