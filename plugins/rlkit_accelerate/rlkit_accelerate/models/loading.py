"""Load causal and encoder-decoder LMs from a folder, a hub name, a config or a model; save and load head weights
beside an HF export so the export itself stays plain ``AutoModelForCausalLM`` (``AutoModelForSeq2SeqLM``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from rlkit_core.errors import ConfigError, RlkitError


def _looks_like_path(name: str) -> bool:
    # hub ids are "name" or "org/name"; ./x, /x, ~/x, a/b/c and x\\y are paths
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def load_causal_lm(model_path: Any, **kwargs: Any) -> nn.Module:
    """A causal LM from a local folder, a hub id, a ``PretrainedConfig`` (fresh weights; trlX
    crashed ILQL on this) or an already built model (returned as is). ``kwargs`` go to
    ``from_pretrained`` / ``from_config`` (``dtype``, ``gguf_file``, ``trust_remote_code``, ...)."""
    return load_lm(model_path, "causal", **kwargs)


def load_seq2seq_lm(model_path: Any, **kwargs: Any) -> nn.Module:
    """An encoder-decoder LM (T5-style) from the same kinds of sources as ``load_causal_lm``."""
    return load_lm(model_path, "seq2seq", **kwargs)


def check_arch(config: Any, arch: str) -> None:
    """``model.model_arch_type`` must match the model: encoder-decoder for ``seq2seq``."""
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    name = getattr(config, "model_type", type(config).__name__)
    if arch == "seq2seq" and not encoder_decoder:
        raise ConfigError(
            f"model.model_arch_type: seq2seq needs an encoder-decoder model (e.g. T5), but {name!r} is decoder-only; "
            "set model.model_arch_type: causal"
        )
    if arch == "causal" and encoder_decoder:
        raise ConfigError(
            f"model.model_arch_type: causal, but {name!r} is an encoder-decoder model; set model.model_arch_type: seq2seq"
        )


def load_lm(model_path: Any, arch: str = "causal", **kwargs: Any) -> nn.Module:
    """A causal (``arch="causal"``) or encoder-decoder (``"seq2seq"``) LM; a model of the other
    kind is a one-line ConfigError naming ``model.model_arch_type``."""
    import transformers
    from transformers import PretrainedConfig, PreTrainedModel

    auto = transformers.AutoModelForSeq2SeqLM if arch == "seq2seq" else transformers.AutoModelForCausalLM
    what = "an encoder-decoder LM" if arch == "seq2seq" else "a causal LM"
    if isinstance(model_path, PreTrainedModel):
        check_arch(model_path.config, arch)
        return model_path
    if isinstance(model_path, PretrainedConfig):
        check_arch(model_path, arch)
        kwargs.pop("gguf_file", None)
        return auto.from_config(model_path, **kwargs)
    if not isinstance(model_path, (str, os.PathLike)):
        raise RlkitError(f"model_path: expected a folder, a hub id or a config, got {type(model_path).__name__}")
    name = os.fspath(model_path)
    if isinstance(model_path, os.PathLike) or _looks_like_path(name) or os.path.exists(name):
        path = Path(name).expanduser()
        if not path.is_dir():
            raise RlkitError(f"model_path {name!r}: no such folder")
        name = str(path)
        if (path / "config.json").is_file():  # check the kind before a confusing loader error
            try:
                config = transformers.AutoConfig.from_pretrained(name, trust_remote_code=kwargs.get("trust_remote_code", False))
            except (OSError, ValueError):
                config = None  # the loader below reports it
            if config is not None:
                check_arch(config, arch)
    from rlkit_accelerate.quiet import no_transformers_progress

    try:
        with no_transformers_progress():  # a "Loading weights" bar per model says nothing
            model = auto.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RlkitError(f"model_path {name!r}: cannot load {what} ({first_line})") from error
    check_arch(model.config, arch)
    return model


def substate(state_dict: dict[str, Any] | None, prefix: str) -> dict[str, Any] | None:
    """The entries of ``state_dict`` under ``prefix.``, with the prefix removed (None stays None)."""
    if state_dict is None:
        return None
    return {k[len(prefix) + 1 :]: v for k, v in state_dict.items() if k.startswith(prefix + ".")}


def save_heads(modules: dict[str, nn.Module | None], path: str | os.PathLike, state_dict: dict[str, Any] | None = None) -> None:
    """One safetensors file with each module's state dict under its name as prefix.

    ``state_dict``: the owner's full state (gathered from a sharded engine), keyed by the same
    names; it replaces the modules' own, which hold only a shard there."""
    from safetensors.torch import save_file

    tensors = {
        f"{prefix}.{key}": value.detach().contiguous().cpu()
        for prefix, module in modules.items()
        if module is not None
        for key, value in (substate(state_dict, prefix) if state_dict is not None else module.state_dict()).items()
    }
    save_file(tensors, os.fspath(path))


def load_heads(modules: dict[str, nn.Module | None], path: str | os.PathLike) -> None:
    """Inverse of ``save_heads``; every key must match (missing or extra keys are an error)."""
    from safetensors.torch import load_file

    try:
        tensors = load_file(os.fspath(path))
    except Exception as error:  # SafetensorError (a cut or damaged file) derives from none of OSError/ValueError
        raise RlkitError(f"{path}: not a readable safetensors file ({str(error).splitlines()[0]})") from error
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
