"""Checkpoint folders that are either complete or absent.

A checkpoint is written into a hidden temporary folder beside its final place and renamed
into place only when every file is on disk, so a run killed mid-write leaves no folder that
``latest_checkpoint`` or a resume would pick up. Leftover temporary folders are removed on
the next save.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from rlkit_core.errors import RlkitError

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)$")
COMPLETE_MARKER = "COMPLETE"
TMP_PREFIX = ".tmp-"


def temporary_for(final: str | os.PathLike) -> Path:
    """The hidden folder a checkpoint is written into before it is renamed to ``final``."""
    final = Path(final)
    return final.parent / f"{TMP_PREFIX}{final.name}"


def start_temporary(final: str | os.PathLike) -> Path:
    """Create an empty temporary folder for ``final`` (main process only)."""
    tmp = temporary_for(final)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_temporary(final: str | os.PathLike) -> Path:
    """Mark the temporary folder complete and rename it to ``final`` (main process only).

    An older ``final`` (e.g. ``best_checkpoint``) is kept until the new one is in place.
    """
    final, tmp = Path(final), temporary_for(final)
    (tmp / COMPLETE_MARKER).write_text("ok\n")
    _fsync_tree(tmp)
    if final.exists():
        old = final.parent / f"{TMP_PREFIX}{final.name}-old"
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    return final


@contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Single-process form: yield a temporary folder, rename it to ``final`` on success.

    On an exception the temporary folder is removed and ``final`` is left as it was.
    """
    tmp = start_temporary(final)
    try:
        yield tmp
        commit_temporary(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def remove_stale_temporaries(parent: str | os.PathLike) -> None:
    """Delete temporary folders left by a killed run."""
    parent = Path(parent)
    if parent.is_dir():
        for path in parent.iterdir():
            if path.name.startswith(TMP_PREFIX) and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)


def is_complete(path: str | os.PathLike) -> bool:
    return (Path(path) / COMPLETE_MARKER).is_file()


def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The complete ``checkpoint_<step>`` with the highest step, or None."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return None
    found = []
    for path in root.iterdir():
        match = CHECKPOINT_PATTERN.match(path.name)
        if match and path.is_dir() and is_complete(path):
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def resolve_resume_path(path: str | os.PathLike) -> Path:
    """``train.resume_from_checkpoint`` may name a checkpoint or a checkpoint_dir (latest)."""
    path = Path(path)
    if is_complete(path):
        return path
    latest = latest_checkpoint(path)
    if latest is not None:
        return latest
    if path.is_dir() and CHECKPOINT_PATTERN.match(path.name):
        raise RlkitError(f"checkpoint {path} is incomplete (no {COMPLETE_MARKER} marker); resume from an earlier one")
    raise RlkitError(f"train.resume_from_checkpoint: no complete checkpoint at {path}")


# --- random state --------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
