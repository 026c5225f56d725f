"""The NeMo engine on a machine without CUDA: megatron-core on the CPU with gloo.

megatron-core hard-codes CUDA in a few places (``device="cuda"`` literals in the pipeline
schedules and the mixed-precision optimizer's loss scale, ``torch.cuda.current_device()`` for
buffers, ``torch.cuda.synchronize`` in p2p, the optimizers' ``param.type() == "torch.cuda.FloatTensor"``, the CUDA RNG state in ``tensor_parallel.random``,
streams). Rather than patch each module, :func:`enable` installs a ``TorchFunctionMode`` that
sends every CUDA device request to the CPU, and CPU stand-ins for those ``torch.cuda`` calls.
The engine calls it when ``torch.cuda.is_available()`` is false; with CUDA nothing is changed.
It is process-wide and permanent: a process without CUDA has no CUDA to give back.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode


def _is_cuda(device) -> bool:
    if device is None:
        return False
    if isinstance(device, int):  # a bare index means a CUDA device to torch
        return True
    return torch.device(device).type == "cuda"


def _is_cuda_arg(value) -> bool:
    try:
        return isinstance(value, (str, int, torch.device)) and _is_cuda(value)
    except (RuntimeError, TypeError):
        return False


class CudaToCpu(TorchFunctionMode):
    """Every tensor asked for on a CUDA device is made on the CPU; ``.cuda()`` is the identity."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):  # data samplers pin their counters for the GPU
            kwargs["pin_memory"] = False
        if func is torch.Tensor.cuda or func is torch.Tensor.pin_memory:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            # megatron-core's optimizers sort parameters by their type name, CUDA's only
            return func(*args).replace("torch.", "torch.cuda.", 1)
        if func is torch.Tensor.to and args[1:] and not isinstance(args[1], torch.Tensor) and _is_cuda_arg(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


_ENABLED = False


def enabled() -> bool:
    return _ENABLED


def enable() -> None:
    """Install the CPU mode for this process (idempotent). Refused where CUDA exists."""
    global _ENABLED
    if _ENABLED:
        return
    if torch.cuda.is_available():
        raise RuntimeError("rlkit_nemo.cpu.enable: CUDA is available; the CPU mode is for machines without it")
    _ENABLED = True
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.manual_seed = torch.manual_seed  # the RNG tracker keeps CPU generator states
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    torch.cuda.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    torch.cuda.Stream = lambda *a, **k: None
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.current_stream = lambda *a, **k: None
    import megatron.core.tensor_parallel.random as mrandom

    mrandom._set_cuda_rng_state = lambda new_state, *a, **k: torch.set_rng_state(new_state)
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    CudaToCpu().__enter__()  # for the life of the process
