"""The loop's own checkpoint state: plain containers of tensors and numbers, written with
``torch.save`` and read back with ``weights_only=True`` so a shared checkpoint cannot run code.

Random states are kept per rank (each data-parallel rank samples with its own stream) in a
form ``weights_only`` accepts: numpy's key array becomes a tensor.
"""

from __future__ import annotations

import dataclasses
import pickle
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlkit_core.errors import RlkitError


def plain(value: Any) -> Any:
    """Dataclasses -> dicts, numpy arrays -> tensors, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.astype(np.int64) if value.dtype == np.uint32 else value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_state(path: str | Path, state: dict[str, Any]) -> None:
    torch.save(plain(state), path)


def read_state(path: str | Path) -> dict[str, Any]:
    """A state file written by :func:`write_state`; anything that needs code to unpickle is refused."""
    path = Path(path)
    if not path.is_file():
        raise RlkitError(f"{path}: missing from the checkpoint; it is incomplete, resume from another one")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise refused(path, exc) from None
    except (RuntimeError, EOFError) as exc:
        raise RlkitError(f"{path}: unreadable ({str(exc).splitlines()[0][:160]}); the file is truncated or damaged, "
                         f"resume from another checkpoint") from None


def refused(path: str | Path, exc: Exception) -> RlkitError:
    """One line for a file that ``weights_only`` loading refused: the file and what it would have
    called (torch's own message ends by suggesting ``weights_only=False``, which runs it)."""
    called = re.search(r"GLOBAL ([\w.]+)", str(exc))
    what = called.group(1) if called else (str(exc).splitlines() or [type(exc).__name__])[0][:160]
    return RlkitError(f"{path}: refused, it holds objects that need code to load ({what}); "
                      f"only load checkpoints written by rlkit")


def rng_state() -> dict[str, Any]:
    return plain({
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    })


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
