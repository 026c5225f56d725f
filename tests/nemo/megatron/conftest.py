"""Test-only patches that let megatron-core (and NeMo's Lightning trainer) run on CPU with gloo.

megatron-core and NeMo hard-code CUDA in a few places (device="cuda" literals in the pipeline
schedules and the optimizer's loss scale, ``torch.cuda.current_device()`` for buffers,
``torch.cuda.synchronize`` in p2p, CUDA RNG state in ``tensor_parallel.random``,
``torch.cuda.Stream`` in NeMo's ``megatron_parallel``). Rather than patch each module, a
``TorchFunctionMode`` sends every CUDA device request to the CPU and the few ``torch.cuda``
calls they make become CPU equivalents. None of this is in the plugin: on a GPU the code
runs unpatched.

The torchrun workers import this file (their folder is on PYTHONPATH) and call
:func:`patch_for_cpu` first; the in-process tests get it from the ``megatron_cpu`` fixture.
"""

from __future__ import annotations

import contextlib
import os
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

HERE = os.path.dirname(os.path.abspath(__file__))


def _is_cuda(device) -> bool:
    if device is None:
        return False
    if isinstance(device, int):  # a bare index means a CUDA device to torch
        return True
    return torch.device(device).type == "cuda"


class CudaToCpu(TorchFunctionMode):
    """Every tensor asked for on a CUDA device is made on the CPU; ``.cuda()`` is the identity."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):  # NeMo's data sampler pins its counters for the GPU
            kwargs["pin_memory"] = False
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to and args[1:] and not isinstance(args[1], torch.Tensor) and _is_cuda_arg(args[1]):
            args = (args[0], "cpu", *args[2:])
        if func in (torch.Tensor.pin_memory,):
            return args[0]
        return func(*args, **kwargs)


def _is_cuda_arg(value) -> bool:
    try:
        return isinstance(value, (str, int, torch.device)) and _is_cuda(value)
    except (RuntimeError, TypeError):
        return False


class _CpuRngState:
    """Stands in for the CUDA RNG calls of ``tensor_parallel.random``: the CPU generator."""

    @staticmethod
    def get_rng_state(*args, **kwargs):
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *args, **kwargs):
        torch.set_rng_state(state)


_PATCHED = False


def patch_for_cpu() -> None:
    """Install the patches for this process (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    _PATCHED = True
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.manual_seed = torch.manual_seed  # the RNG tracker keeps CPU generator states
    torch.cuda.get_rng_state = _CpuRngState.get_rng_state
    torch.cuda.set_rng_state = _CpuRngState.set_rng_state
    torch.cuda.Stream = lambda *a, **k: None
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.current_stream = lambda *a, **k: None
    import megatron.core.tensor_parallel.random as mrandom

    mrandom._set_cuda_rng_state = lambda new_state, *a, **k: torch.set_rng_state(new_state)
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    CudaToCpu().__enter__()  # for the life of the process (pytest runs workers in subprocesses)


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
