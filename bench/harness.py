"""What every bench worker shares, on both sides (rlkit's venv and the peer's): the case
spec, thread pinning, phase timers and the result file.

Stdlib only at import time (torch is imported inside functions): the peer's environment has
no rlkit, and the runner imports this module without torch.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator


def worker_args(description: str) -> argparse.Namespace:
    """``--spec spec.json --out result.json [--variant NAME]``: how the runner calls a worker."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--spec", required=True, help="case settings written by bench/run.py")
    parser.add_argument("--out", required=True, help="where to write the result JSON")
    parser.add_argument("--variant", default="", help="which side or setting of the case to run")
    return parser.parse_args()


def read_spec(path: str | os.PathLike) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def write_result(path: str | os.PathLike, result: dict[str, Any]) -> None:
    result = {"peak_rss_bytes": peak_rss_bytes(), **result}
    Path(path).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def setup_torch(spec: dict[str, Any]):
    """Pin CPU threads (the runner also sets OMP_NUM_THREADS before torch loads), seed, and
    return ``(torch, device, dtype)``."""
    import torch

    device = spec["device"]
    if device == "cpu":
        torch.set_num_threads(int(spec.get("threads", 1)))
    elif not torch.cuda.is_available():
        raise SystemExit(f"bench: --device {device} but torch {torch.__version__} sees no CUDA device")
    torch.manual_seed(int(spec.get("seed", 0)))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[spec["dtype"]]
    return torch, torch.device(device), dtype


def sync(device: str) -> None:
    """Wait for queued GPU work so a clock reading covers it."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def clock(device: str) -> Callable[[], float]:
    """The bench's clock: on CPU the process's CPU time (user + system), on a GPU wall time.

    The CPU is shared (other jobs run beside the bench), so wall time mostly measures the
    neighbours; a process pinned to one thread is charged CPU time only while it runs, which
    is what its work costs on an idle core. On a GPU the wall time after a sync is the cost.
    """
    return time.process_time if device == "cpu" else time.perf_counter


class PhaseTimer:
    """Exclusive time per phase (by ``clock(device)``; wall time kept beside it), collected
    by wrapping callables in place.

    ``wrap(obj, "name", phase)`` replaces ``obj.name`` with a timed version; ``phase`` is a
    string or a function of the call's arguments returning one (e.g. rollout vs train by
    ``torch.is_grad_enabled()``). A wrapped call inside another wrapped call is charged to
    its own phase and subtracted from the outer one, so the phases add up to the time spent
    in wrapped code, never more.
    """

    def __init__(self, device: str = "cpu", clock_fn: Callable[[], float] | None = None,
                 wall_fn: Callable[[], float] | None = None) -> None:
        self.device = device
        self.clock = clock_fn or clock(device)
        self.wall_clock = wall_fn or time.perf_counter
        self.seconds: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._children: list[tuple[float, float]] = []  # (clock, wall) spent in nested wrapped calls

    def charge(self, phase: str, seconds: float, wall: float | None = None) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        self.wall[phase] = self.wall.get(phase, 0.0) + (seconds if wall is None else wall)
        self.calls[phase] = self.calls.get(phase, 0) + 1

    def _enter(self) -> tuple[float, float]:
        sync(self.device)
        self._children.append((0.0, 0.0))
        return self.clock(), self.wall_clock()

    def _exit(self, phase: str, start: tuple[float, float]) -> None:
        sync(self.device)
        elapsed, wall = self.clock() - start[0], self.wall_clock() - start[1]
        nested, nested_wall = self._children.pop()
        self.charge(phase, elapsed - nested, wall - nested_wall)
        if self._children:
            outer, outer_wall = self._children[-1]
            self._children[-1] = (outer + elapsed, outer_wall + wall)

    def timed(self, fn: Callable, phase: str | Callable[..., str]) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            name = phase(*args, **kwargs) if callable(phase) else phase
            start = self._enter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._exit(name, start)

        return wrapper

    def wrap(self, obj: Any, attr: str, phase: str | Callable[..., str]) -> None:
        setattr(obj, attr, self.timed(getattr(obj, attr), phase))

    def step_summary(self) -> dict[str, Any]:
        """Totals for a result file: the step (every phase but ``load``), its rollout and
        train parts (by phase prefix), the load time and the phases themselves."""
        phases = {k: v for k, v in self.seconds.items() if k != "load"}
        return {
            "step_s": sum(phases.values()),
            "step_wall_s": sum(v for k, v in self.wall.items() if k != "load"),
            "clock": "cpu" if self.clock is time.process_time else "wall",
            "rollout_s": sum(v for k, v in phases.items() if k.startswith("rollout/")),
            "train_s": sum(v for k, v in phases.items() if k.startswith("train/")),
            "load_s": self.seconds.get("load", 0.0),
            "phases": phases,
        }

    @contextlib.contextmanager
    def section(self, phase: str) -> Iterator[None]:
        """``with timer.section("load"): ...`` for code that is not one call."""
        start = self._enter()
        try:
            yield
        finally:
            self._exit(phase, start)


def grad_phase(rollout: str, train: str) -> Callable[..., str]:
    """A phase chooser: ``rollout`` under ``torch.no_grad()``, ``train`` otherwise."""

    def choose(*args, **kwargs) -> str:
        import torch

        return train if torch.is_grad_enabled() else rollout

    return choose


def rollout_then_learn(timer, rollout: Callable[[], Any], learn: Callable[[], Any]) -> dict[str, int]:
    """One rollout phase and one update under the timer's ``rollout/other`` and ``train/other``
    sections (what the wrapped calls leave out); the process's peak RSS after loading, after
    the rollout and after the update (where the peak is reached)."""
    peaks = {"load": peak_rss_bytes()}
    with timer.section("rollout/other"):
        rollout()
    peaks["rollout"] = peak_rss_bytes()
    with timer.section("train/other"):
        learn()
    peaks["train"] = peak_rss_bytes()
    return peaks


def peak_rss_bytes() -> int:
    """This process's peak resident memory since it started its program.

    ``/proc/self/status`` VmHWM belongs to the current address space, made fresh by exec.
    ``getrusage`` (and ``wait4`` in the parent) keep the maximum from before exec too, which
    for a spawned worker includes the RSS of the process that forked it; it is only the
    fallback where there is no /proc.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def cuda_peak_bytes(device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return int(torch.cuda.max_memory_allocated())
