"""``train.save_total_limit``: keep the newest N ``checkpoint_<step>`` folders of a run.

Only complete checkpoints of this run's folder are counted and removed, oldest first;
``best_checkpoint`` (``train.save_best``), the final ``hf_model`` export and a folder without its
``COMPLETE`` marker are never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlkit_methods.run.checkpoint import CHECKPOINT_PATTERN, is_complete


def rotate_checkpoints(checkpoint_dir: str | Path, keep: int) -> list[Path]:
    """Remove all but the ``keep`` newest complete checkpoints; returns what was removed."""
    root = Path(checkpoint_dir)
    found = sorted((int(m.group(1)), p) for p in root.iterdir()
                   if (m := CHECKPOINT_PATTERN.match(p.name)) and p.is_dir() and is_complete(p))
    removed = [path for _, path in found[: max(len(found) - keep, 0)]]
    for path in removed:
        shutil.rmtree(path)
    return removed
