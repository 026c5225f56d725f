"""Metrics: a JSONL file that is always written, plus an optional tracker.

One JSON record per line, ``{"step": n, "kind": "train" | "eval" | "rollout", ...metrics}``,
in ``train.logging_dir`` (default: ``<checkpoint_dir>/logs``). Only the main process writes.
``train.tracker`` adds TensorBoard or Weights & Biases (:mod:`.tracking`, with their own packages).

NaN and infinities are written as the strings ``"nan"``, ``"inf"`` and ``"-inf"`` (plain JSON
has no such numbers) and read back as floats. A last line cut short (a run killed while
writing) is dropped when the log is read or resumed; a broken line before it is an error
naming the file and line.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import time
from pathlib import Path
from typing import Any

from rlkit_core.errors import RlkitError

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    return value


def _plain_tree(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_tree(v) for v in value]
    return _plain(value)


NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _numbers_back(value: Any) -> Any:
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _numbers_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_back(v) for v in value]
    return value


def parse_lines(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of a JSONL log and their lines; a cut-short last line is left out."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    records, kept = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "step" not in record:
                raise ValueError("not a record with a step")
        except ValueError as exc:
            if number == len(lines) or all(not rest.strip() for rest in lines[number:]):
                break  # the last line, cut short by a kill: dropped
            raise RlkitError(f"{path}:{number}: not a metrics record ({str(exc)[:80]}); remove or fix that line") from None
        records.append(_numbers_back(record))
        kept.append(line)
    return records, kept


class MetricsLog:
    def __init__(self, directory: str | Path, *, enabled: bool = True, resume: bool = False) -> None:
        self.path = Path(directory) / METRICS_FILE
        self.enabled = enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not resume and self.path.exists():
                self.path.unlink()
            elif resume:
                self._drop_partial_lines()

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
                handle.write(json.dumps({"step": step, "samples": _plain_tree(samples)}, default=str) + "\n")

    def truncate_after(self, step: int) -> None:
        """On resume, drop records past the checkpoint's step so the log reads as one run."""
        self._rewrite(lambda record: record["step"] <= step)

    def _drop_partial_lines(self) -> None:
        self._rewrite(lambda record: True)

    def _rewrite(self, keep) -> None:
        """Keep the records ``keep`` accepts; replaced atomically, so a kill here loses nothing."""
        for path in (self.path, self.path.with_name(SAMPLES_FILE)):
            if self.enabled and path.exists():
                records, lines = parse_lines(path)
                text = "".join(line + "\n" for record, line in zip(records, lines) if keep(record))
                if text != path.read_text(encoding="utf-8", errors="replace"):
                    draft = path.with_name(path.name + ".rewrite")
                    draft.write_text(text)
                    os.replace(draft, path)


def read_metrics(directory: str | Path, name: str = METRICS_FILE) -> list[dict[str, Any]]:
    """The records of a log, NaN and infinities as floats; a cut-short last line left out."""
    return parse_lines(Path(directory) / name)[0]
