"""Load causal LMs from a folder, a hub name, a config or a model; save and load head weights
beside an HF export so the export itself stays plain ``AutoModelForCausalLM``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from rlkit_core.errors import RlkitError


def _looks_like_path(name: str) -> bool:
    # hub ids are "name" or "org/name"; ./x, /x, ~/x, a/b/c and x\\y are paths
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def load_causal_lm(model_path: Any, **kwargs: Any) -> nn.Module:
    """A causal LM from a local folder, a hub id, a ``PretrainedConfig`` (fresh weights; trlX
    crashed ILQL on this) or an already built model (returned as is). ``kwargs`` go to
    ``from_pretrained`` / ``from_config`` (``dtype``, ``gguf_file``, ``trust_remote_code``, ...)."""
    from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    if isinstance(model_path, PreTrainedModel):
        return model_path
    if isinstance(model_path, PretrainedConfig):
        kwargs.pop("gguf_file", None)
        return AutoModelForCausalLM.from_config(model_path, **kwargs)
    if not isinstance(model_path, (str, os.PathLike)):
        raise RlkitError(f"model_path: expected a folder, a hub id or a config, got {type(model_path).__name__}")
    name = os.fspath(model_path)
    if isinstance(model_path, os.PathLike) or _looks_like_path(name) or os.path.exists(name):
        path = Path(name).expanduser()
        if not path.is_dir():
            raise RlkitError(f"model_path {name!r}: no such folder")
        name = str(path)
    try:
        return AutoModelForCausalLM.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RlkitError(f"model_path {name!r}: cannot load a causal LM ({first_line})") from error


def save_heads(modules: dict[str, nn.Module | None], path: str | os.PathLike) -> None:
    """One safetensors file with each module's state dict under its name as prefix."""
    from safetensors.torch import save_file

    tensors = {
        f"{prefix}.{key}": value.detach().contiguous().cpu()
        for prefix, module in modules.items()
        if module is not None
        for key, value in module.state_dict().items()
    }
    save_file(tensors, os.fspath(path))


def load_heads(modules: dict[str, nn.Module | None], path: str | os.PathLike) -> None:
    """Inverse of ``save_heads``; every key must match (missing or extra keys are an error)."""
    from safetensors.torch import load_file

    tensors = load_file(os.fspath(path))
    for prefix, module in modules.items():
        if module is None:
            continue
        own = {k[len(prefix) + 1 :]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
        try:
            module.load_state_dict(own, strict=True)
        except RuntimeError as error:
            raise RlkitError(f"{path}: heads do not match the model ({str(error).splitlines()[0]})") from error
    unknown = sorted({k.split(".")[0] for k in tensors} - set(modules))
    if unknown:
        raise RlkitError(f"{path}: unexpected heads {unknown}")


def load_saved_heads(model_path: Any, modules: dict[str, nn.Module | None], filename: str) -> None:
    """Load ``model_path/filename`` into ``modules`` if ``model_path`` is a folder holding it
    (a config or a plain HF export has none: the heads keep their fresh initialisation)."""
    if isinstance(model_path, (str, os.PathLike)):
        path = Path(model_path).expanduser() / filename
        if path.is_file():
            load_heads(modules, path)
