"""PEFT adapters (LoRA, IA3, ...) on a causal or seq2seq LM: ``model.peft_config`` in a config.

With adapters the PPO reference is the same model with its adapters disabled, so there is
no second copy; only adapter weights and rlkit's heads train. Prompt learning (virtual
tokens, prefixes) is for SFT only: PPO's and ILQL's heads read the hidden states position
by position, and virtual tokens shift those positions.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from rlkit_core.errors import ConfigError


def is_peft_model(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def _linear_names(model: nn.Module) -> list[str]:
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"})


# prompt-learning types whose forward and generate are plain virtual tokens or prefixes (the
# others need task ids or token type masks that rlkit's data does not carry)
PROMPT_LEARNING = ("PROMPT_TUNING", "P_TUNING", "PREFIX_TUNING")


def make_peft_config(peft_config: Any, task_type: str = "CAUSAL_LM", prompt_learning: bool = False):
    """A peft config from a dict (``{peft_type: LORA, r: 8, ...}``) or a peft config object.

    ``prompt_learning``: whether the trainer accepts the types in ``PROMPT_LEARNING`` (SFT)."""
    try:
        import peft
    except ImportError:
        raise ConfigError("model.peft_config: needs the peft package; pip install peft") from None
    if isinstance(peft_config, peft.PeftConfig):
        config = peft_config
    elif isinstance(peft_config, dict):
        fields = dict(peft_config)
        # a peft.PeftType / TaskType member is its value (str() of one is 'PeftType.LORA')
        kind = str(getattr(fields.get("peft_type"), "value", fields.get("peft_type", ""))).upper()
        known = sorted(t.value for t in peft.PeftType)
        if kind not in known:
            raise ConfigError(f"model.peft_config.peft_type: unknown peft type {fields.get('peft_type')!r}; choose one of {', '.join(known)}")
        fields["peft_type"] = kind
        task = fields.setdefault("task_type", task_type)
        if task is not None:
            fields["task_type"] = str(getattr(task, "value", task)).upper()
            tasks = [t.value for t in peft.TaskType]
            if fields["task_type"] not in tasks:
                raise ConfigError(f"model.peft_config.task_type: unknown task type {task!r}; choose one of {', '.join(tasks)}")
        try:
            config = peft.get_peft_config(fields)
        except (TypeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"model.peft_config: {first}") from None
    else:
        raise ConfigError(f"model.peft_config: expected a mapping or a peft config, got {type(peft_config).__name__}")
    kind = peft_type(config)
    if config.is_prompt_learning and kind not in PROMPT_LEARNING:
        raise ConfigError(f"model.peft_config: {kind} is not supported; prompt learning works with "
                          f"{', '.join(PROMPT_LEARNING)} (SFT), adapters such as LORA or IA3 with every method")
    if config.is_prompt_learning and not prompt_learning:
        raise ConfigError(
            f"model.peft_config: {kind} (prompt learning) is available for SFT only, since PPO's and ILQL's heads "
            "read the hidden states position by position; use an adapter method such as LORA or IA3"
        )
    return config


def peft_type(config: Any) -> str:
    kind = config.peft_type
    return getattr(kind, "value", str(kind))


def virtual_tokens(model: nn.Module) -> int:
    """How many virtual tokens peft puts in front of the input embeddings (and so of a causal
    LM's logits): ``num_virtual_tokens`` for prompt tuning, 0 for prefixes (they live in the
    attention cache) and for adapters."""
    if not is_peft_model(model):
        return 0
    config = model.active_peft_config
    return config.num_virtual_tokens if config.is_prompt_learning and peft_type(config) != "PREFIX_TUNING" else 0


def apply_peft(model: nn.Module, peft_config: Any, task_type: str = "CAUSAL_LM", prompt_learning: bool = False) -> nn.Module:
    """Wrap ``model`` with adapters; a config naming modules the model lacks is a one-line error."""
    if peft_config is None:
        return model
    import peft

    config = make_peft_config(peft_config, task_type, prompt_learning)
    try:
        return peft.get_peft_model(model, config)
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"model.peft_config: {first}; the model's linear layers are named {', '.join(_linear_names(model))}") from None


def save_base_model(model: nn.Module, directory, merge_adapters: bool = False, state_dict: dict[str, Any] | None = None,
                    **kwargs: Any) -> None:
    """``save_pretrained``; with adapters and ``merge_adapters``, a merged plain model.

    ``state_dict``: the model's full state gathered from a sharded engine (ZeRO-3, FSDP)."""
    if merge_adapters and is_peft_model(model):
        if model.active_peft_config.is_prompt_learning:
            raise ConfigError(f"merge_adapters: {peft_type(model.active_peft_config)} keeps its virtual tokens outside the "
                              "model's weights, so there is nothing to merge; save the adapter and load it with peft")
        if state_dict is not None:
            raise ConfigError("merge_adapters: not available while the model is sharded (FSDP); save the adapter, "
                              "then merge it on one process with peft's merge_and_unload")
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    from rlkit_accelerate.quiet import no_transformers_progress

    with no_transformers_progress():  # a "Writing model shards" bar at every checkpoint says nothing
        model.save_pretrained(directory, state_dict=state_dict, **kwargs)
