"""Fixtures for the NeMo venv's tests: megatron-core on CPU with gloo.

The CPU mode is the plugin's (:mod:`rlkit_nemo.cpu`, which the engine turns on by itself on a
machine without CUDA); the torchrun workers import this file (their folder is on PYTHONPATH)
and call :func:`patch_for_cpu` before megatron-core runs anything, the in-process tests get
it from the ``megatron_cpu`` fixture.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def patch_for_cpu() -> None:
    """This process in the plugin's CPU mode (idempotent)."""
    from rlkit_nemo.cpu import enable

    enable()


def worker_env() -> dict:
    """Environment for a torchrun worker: one thread, and this folder on the path."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_torchrun(script: str, *args: str, nproc: int = 2, timeout: int = 600):
    """Run ``script`` (a file in this folder) on ``nproc`` CPU processes; fail with its stderr."""
    import shutil
    import subprocess
    from pathlib import Path

    runner = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    port = 29000 + os.getpid() % 1000
    result = subprocess.run(
        [runner, "--nproc_per_node", str(nproc), "--master_port", str(port), os.path.join(HERE, script), *args],
        capture_output=True, text=True, timeout=timeout, env=worker_env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


@pytest.fixture(scope="session")
def torchrun():
    """``torchrun(script, *args)``: run a worker of this folder on two CPU processes."""
    return run_torchrun


@pytest.fixture(scope="session")
def megatron_cpu():
    """This process as a world of one (gloo) with the CPU patches, for in-process tests."""
    import torch.distributed as dist

    patch_for_cpu()
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(28000 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=0, world_size=1)
    yield
