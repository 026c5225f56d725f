"""``train.tracker``: TensorBoard or Weights & Biases, whatever the engine, main process only.

Records go to ``<logging_dir>/<project_name>`` for TensorBoard and to wandb's project
``train.project_name``. The JSONL metrics log (:mod:`.metrics_log`) is written either way.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

from rlkit_core.errors import ConfigError

TRACKERS = ("tensorboard", "wandb")


def check_tracker(name: str | None) -> None:
    if name is None:
        return
    if name not in TRACKERS:
        raise ConfigError(f"train.tracker: unknown tracker {name!r}; use one of {', '.join(TRACKERS)}, or null")
    if importlib.util.find_spec(name) is None:
        raise ConfigError(f"train.tracker: {name} is not installed; pip install {name}, or set train.tracker: null")


class Tracker:
    def __init__(self, config, logging_dir: Path, *, enabled: bool) -> None:
        train = config.train
        self.name = train.tracker if enabled else None
        check_tracker(train.tracker)
        self.writer = None
        if self.name == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(Path(logging_dir) / train.project_name))
            self.writer.add_text("config", f"```\n{flat_config(config.to_dict())}\n```")
        elif self.name == "wandb":
            import wandb

            self.writer = wandb.init(project=train.project_name, config=flat_config(config.to_dict()),
                                     dir=str(logging_dir), **wandb_fields(train))

    def log(self, stats: dict[str, Any], step: int) -> None:
        if self.writer is None:
            return
        numbers = {k: float(v) for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.name == "tensorboard":
            for key, value in numbers.items():
                if math.isfinite(value):
                    self.writer.add_scalar(key, value, step)
        else:
            self.writer.log(numbers, step=step)

    def finish(self) -> None:
        if self.writer is not None:
            (self.writer.close if self.name == "tensorboard" else self.writer.finish)()
            self.writer = None


def wandb_fields(train) -> dict[str, Any]:
    """trlX's tracker fields: run name, entity, group, tags."""
    fields = {"name": getattr(train, "run_name", None), "entity": getattr(train, "entity_name", None),
              "group": getattr(train, "group_name", None), "tags": list(getattr(train, "tags", None) or []) or None}
    return {k: v for k, v in fields.items() if v is not None}


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, name + "."))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[name] = value
        else:
            out[name] = str(value)
    return out
