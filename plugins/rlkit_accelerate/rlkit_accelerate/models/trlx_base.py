"""What trlX's model wrappers share (``PreTrainedModelWrapper``): ``from_config``,
``from_pretrained(path, peft_config=...)``, ``post_init`` and a ``state_dict`` without the
frozen reference, written over rlkit's model classes.

The reference model (``reference``: a frozen copy of the top blocks, or of the whole model
for ``num_layers_unfrozen = -1``) is derived from the policy, so it is not part of the state:
a checkpoint saved with one ``num_layers_unfrozen`` loads into a model built with another,
and after loading the reference is rebuilt from the loaded weights (the reference is the
policy you start from). trlX saved its ``frozen_head``; such keys are dropped on load.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn
from torch.nn.modules.module import _IncompatibleKeys

from rlkit_accelerate.models.adapters import apply_peft, is_peft_model
from rlkit_accelerate.models.loading import load_lm, load_saved_heads

DERIVED = ("reference.", "frozen_head.")  # rebuilt from the policy, never saved or loaded


class TrlxWrapper:
    """Mixin for an rlkit model class ``cls(base_model, **options)``; set ``_arch``
    ("causal"/"seq2seq"), ``_wrapper_args`` (trlX's ``_supported_args``) and ``_head_names``."""

    _arch = "causal"
    _wrapper_args: tuple[str, ...] = ()
    _head_names: tuple[str, ...] = ()

    @classmethod
    def _split_kwargs(cls, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        wrapped = {k: v for k, v in kwargs.items() if k in cls._wrapper_args}
        return wrapped, {k: v for k, v in kwargs.items() if k not in cls._wrapper_args}

    @classmethod
    def _task_type(cls) -> str:
        return "SEQ_2_SEQ_LM" if cls._arch == "seq2seq" else "CAUSAL_LM"

    @classmethod
    def from_config(cls, config: Any, peft_config: Any = None, **kwargs: Any):
        """A fresh model from a transformers config (``kwargs``: the wrapper's options, e.g.
        ``num_layers_unfrozen``, and ``from_config`` arguments), with adapters if asked."""
        wrapped, rest = cls._split_kwargs(kwargs)
        base = load_lm(config, cls._arch, **rest)
        return cls(apply_peft(base, peft_config, cls._task_type()), **wrapped)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, revision: str | None = None, peft_config: Any = None,
                        *model_args: Any, **kwargs: Any):
        """A model from a folder, hub id or built model, with the heads saved beside it.

        ``peft_config`` adds new adapters; a folder holding a trained adapter
        (``adapter_config.json``) is loaded with its adapter when no ``peft_config`` is given."""
        if model_args:
            raise TypeError(f"{cls.__name__}.from_pretrained: pass model options as keyword arguments")
        wrapped, rest = cls._split_kwargs(kwargs)
        rest.pop("peft_from_pretrained_kwargs", None)
        rest.pop("peft_int8_kwargs", None)
        if revision is not None:
            rest["revision"] = revision
        path = pretrained_model_name_or_path
        adapter_folder = isinstance(path, (str, os.PathLike)) and (Path(path) / "adapter_config.json").is_file()
        if adapter_folder and peft_config is None:
            import peft

            trained = peft.PeftConfig.from_pretrained(os.fspath(path))
            base = load_lm(trained.base_model_name_or_path, cls._arch, **rest)
            # trainable adapters, in eval mode as transformers loads a model (peft makes its
            # lora_dropout training, so a reloaded adapter gave other logits each call)
            base = peft.PeftModel.from_pretrained(base, os.fspath(path), is_trainable=True).eval()
        else:
            base = apply_peft(load_lm(path, cls._arch, **rest), peft_config, cls._task_type())
        model = cls(base, **wrapped)
        load_saved_heads(path, {name: getattr(model, name) for name in cls._head_names}, cls.heads_file)
        return model

    # --- state without the reference --------------------------------------------------------

    def state_dict(self, *args: Any, heads_only: bool = False, **kwargs: Any) -> dict[str, Any]:
        """The policy's and heads' weights (``heads_only``: the heads'); no reference copy."""
        state = nn.Module.state_dict(self, *args, **kwargs)
        prefix = kwargs.get("prefix", args[1] if len(args) > 1 else "")
        heads = tuple(f"{prefix}{name}." for name in self._head_names)
        for key in list(state):
            rest = key[len(prefix):]
            if rest.startswith(DERIVED) or (heads_only and not key.startswith(heads)):
                del state[key]
        return state

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False):
        """Load policy and heads (reference and trlX ``frozen_head`` entries are ignored), then
        rebuild the reference from the loaded policy."""
        state = {k: v for k, v in state_dict.items() if not k.startswith(DERIVED)}
        result = nn.Module.load_state_dict(self, state, strict=False, assign=assign)
        missing = [k for k in result.missing_keys if not k.startswith(DERIVED)]
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}: missing keys {missing}, "
                f"unexpected keys {result.unexpected_keys}"
            )
        self.reset_reference()
        return _IncompatibleKeys(missing, result.unexpected_keys)

    def post_init(self, state_dict: dict[str, Any]) -> None:
        """trlX's name for loading a state after construction (not strict: adapters' states
        hold only part of the model)."""
        self.load_state_dict(state_dict, strict=not is_peft_model(self.base_model))

    def reset_reference(self) -> None:
        """Rebuild the frozen reference from the current policy (nothing to do without one)."""
