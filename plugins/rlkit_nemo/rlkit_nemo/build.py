"""The model a method asks for (:class:`rlkit_core.engine.ModelSpec`) as a Megatron GPT:
converted from an HF model (``pretrained_model``, else ``model.model_path``) or built from the
Megatron YAML, with the spec's heads on the last pipeline stage, its lower blocks frozen, and
a frozen copy of the initial policy as the reference."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from rlkit_core.errors import ConfigError

KEEP_FROM_YAML = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "sequence_parallel", "params_dtype",
                  "activations_checkpoint_granularity", "activations_checkpoint_method", "activations_checkpoint_num_layers",
                  "hidden_dropout", "attention_dropout")


def load_hf_source(source: Any):
    """An HF causal LM from a folder/hub id, a model, a config or a config mapping (random weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    if isinstance(source, PreTrainedModel):
        return source
    if isinstance(source, dict):
        fields = dict(source)
        source = AutoConfig.for_model(fields.pop("model_type"), **fields)
    if isinstance(source, PretrainedConfig):
        return AutoModelForCausalLM.from_config(source)
    try:
        return AutoModelForCausalLM.from_pretrained(source)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model.model_path: {source!r}: cannot load an HF model ({first[:200]}); give an HF folder, "
                          f"or leave model_path empty to build the Megatron YAML's model") from None


def model_source(yaml_model: dict, source: Any, vocab_size: int):
    """(model section, vocabulary size, full Megatron state dict or None, HF config or None).
    With an HF model the architecture is the HF model's, converted; the parallel sizes, dtype,
    dropout and recompute settings stay the Megatron YAML's."""
    from rlkit_nemo.convert import hf_to_megatron, megatron_model_config

    if source is None or source == "":
        return dict(yaml_model), vocab_size, None, None
    hf = load_hf_source(source)
    model = {**megatron_model_config(hf.config), **{k: yaml_model[k] for k in KEEP_FROM_YAML if k in yaml_model}}
    return model, hf.config.vocab_size, hf_to_megatron(hf.state_dict(), hf.config), hf.config


def heads_factory(spec) -> Optional[Callable]:
    """``make_heads(config, vocab)`` for ``spec.heads``; refuses options it has not got."""
    from rlkit_nemo.models.heads import ILQLHeads, ParallelMLPHead

    options = dict(spec.options)
    if spec.heads == "lm":
        if options.get("prompt_learning") and options.get("peft_config"):
            raise ConfigError("model.peft_config: the NeMo engine has no adapters or prompt learning; remove peft_config")
        return None
    if spec.heads == "value":
        if options.get("num_value_layers_unfrozen", 0):
            raise ConfigError("method.num_value_layers_unfrozen: the NeMo engine's value head reads the last hidden state; set it to 0")
        return lambda config, vocab: ParallelMLPHead(config, config.hidden_size, 1)
    if options.get("q_heads", "mlp") != "mlp":
        raise ConfigError(f"method.q_heads: the NeMo engine has mlp Q heads only, not {options['q_heads']!r}; use mlp")
    two_qs, alpha = options.get("two_qs", True), options.get("alpha", 0.99)
    return lambda config, vocab: ILQLHeads(config, config.hidden_size, vocab, two_qs=two_qs, alpha=alpha)


def freeze_lower_layers(module: torch.nn.Module, num_layers: int, num_layers_unfrozen: int) -> None:
    """Train only the top ``num_layers_unfrozen`` transformer blocks, the final norm, the
    output layer and the heads (-1: everything). The embedding is frozen with the lower blocks."""
    if num_layers_unfrozen == -1:
        return
    if not 0 <= num_layers_unfrozen <= num_layers:
        raise ConfigError(f"model.num_layers_unfrozen: {num_layers_unfrozen} is not -1 or in 0..{num_layers} (the model's blocks)")
    from rlkit_nemo.models.sharding import LAYER, _layer_offset, _renumber

    first_trained = num_layers - num_layers_unfrozen
    offset = _layer_offset(module)
    for name, param in module.named_parameters():
        match = LAYER.match(_renumber(name, offset))
        if match is not None:
            param.requires_grad_(int(match.group(2)) >= first_trained)
        elif name.startswith("embedding."):
            param.requires_grad_(num_layers_unfrozen == num_layers)
