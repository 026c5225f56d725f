"""The model a method asks for (:class:`rlkit_core.engine.ModelSpec`) as a Megatron GPT: from
an HF model or a NeMo checkpoint (``pretrained_model``, else ``model.model_path``) or built
from the Megatron YAML, with the spec's heads on the last pipeline stage, its lower blocks
frozen, and a frozen reference equal to the initial policy that shares those blocks.

Each rank reads only its slice of the weights (:mod:`rlkit_nemo.sliced_loading`): an HF folder's
safetensors are read tensor by tensor, rows or columns at a time, and a NeMo checkpoint's
``mp_rank_XX`` files only where they hold the rank's slice. No rank holds the whole model.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any, Callable, Optional

import torch

from rlkit_core.errors import ConfigError

log = logging.getLogger(__name__)

KEEP_FROM_YAML = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "sequence_parallel", "params_dtype",
                  "activations_checkpoint_granularity", "activations_checkpoint_method", "activations_checkpoint_num_layers",
                  "hidden_dropout", "attention_dropout", "make_vocab_size_divisible_by", "transformer_engine", "fp8",
                  "fp8_margin", "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo")


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
        return AutoModelForCausalLM.from_pretrained(source, trust_remote_code=False)  # never a stdin prompt
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model.model_path: {source!r}: cannot load an HF model ({first[:200]}); give an HF folder, "
                          f"a NeMo checkpoint, or leave model_path empty to build the Megatron YAML's model") from None


def _hf_folder_config(source: Any):
    """The HF config of a local folder holding safetensors weights (read lazily), else None."""
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return None
    from transformers import AutoConfig

    from rlkit_nemo.sliced_loading import SafetensorsFile

    if SafetensorsFile.from_folder(source) is None or not os.path.isfile(os.path.join(source, "config.json")):
        return None
    return AutoConfig.from_pretrained(source, trust_remote_code=False)


def _keep_yaml(model: dict, yaml_model: dict) -> dict:
    return {**model, **{k: yaml_model[k] for k in KEEP_FROM_YAML if k in yaml_model}}


def model_source(yaml_model: dict, source: Any, vocab_size: int):
    """(model section, vocabulary size, weights or None, HF config or None).

    With an HF model or a NeMo checkpoint the architecture is theirs (a NeMo checkpoint
    without ``model_config.yaml``, as trlX saved them, takes the Megatron YAML's); the parallel
    sizes, dtype, dropout, recompute, vocabulary padding and Transformer Engine settings stay
    the Megatron YAML's. ``weights`` is a :class:`rlkit_nemo.sliced_loading.Source`. The vocabulary is
    the HF config's, else ``vocab_size`` (the tokenizer's)."""
    from rlkit_nemo.convert import DictReader, HFWeights, hf_config_from_megatron, hf_source, megatron_model_config
    from rlkit_nemo.nemo_checkpoint import is_nemo_checkpoint

    if source is None or source == "":
        model = dict(yaml_model)
        if model.get("layernorm_zero_centered_gamma") and not model.get("transformer_engine"):
            # the local spec's norms hold w itself (initialised to 1, which is layernorm1p's 0):
            # say so, or the export would be read back as layernorm1p, w + 1
            model["layernorm_zero_centered_gamma"] = False
        return model, vocab_size, None, None
    config = _hf_folder_config(source)
    if config is not None:  # read lazily: each rank its slice; HF first (an export folder holds both)
        return _keep_yaml(megatron_model_config(config), yaml_model), config.vocab_size, hf_source(source, config), config
    if is_nemo_checkpoint(source):
        model, weights = nemo_source(yaml_model, source)
        return model, vocab_size, weights, hf_config_from_megatron(model, vocab_size)
    hf = load_hf_source(source)
    model = _keep_yaml(megatron_model_config(hf.config), yaml_model)
    return model, hf.config.vocab_size, HFWeights(DictReader(hf.state_dict()), hf.config), hf.config  # no copy


def nemo_source(yaml_model: dict, path: Any):
    """(model section, :class:`rlkit_nemo.nemo_checkpoint.NeMoWeights`) of a NeMo checkpoint."""
    from rlkit_nemo.model_keys import normalize_model
    from rlkit_nemo.nemo_checkpoint import NeMoCheckpoint, NeMoWeights

    checkpoint = NeMoCheckpoint(path)
    saved = checkpoint.config()
    if saved is None:
        model = dict(yaml_model)
        legacy, zero_centred = bool(model.get("megatron_legacy")), bool(model.get("layernorm_zero_centered_gamma"))
    else:
        legacy = bool(saved.get("megatron_legacy"))
        saved, _ = normalize_model(saved, tp=1, te=False)  # the YAML decides TE and sequence parallelism
        zero_centred = saved["layernorm_zero_centered_gamma"]
        model = _keep_yaml({k: v for k, v in saved.items() if k not in ("padded_vocab_size",)}, yaml_model)
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):  # this run's, not the checkpoint's
        model[key] = yaml_model.get(key, 1)
    # the local layer spec has no zero-centred norms: a layernorm1p weight w is the norm's 1 + w
    use_zero_centred = zero_centred and bool(model.get("transformer_engine"))
    model["layernorm_zero_centered_gamma"] = use_zero_centred
    weights = NeMoWeights(checkpoint, model, legacy_qkv=legacy, norm_offset=1.0 if zero_centred and not use_zero_centred else 0.0)
    return model, weights


def heads_factory(spec) -> Optional[Callable]:
    """``make_heads(config, vocab)`` for ``spec.heads``; refuses options it has not got."""
    from rlkit_nemo.models.heads import ILQLHeads, ParallelMLPHead, ScoreHead

    options = dict(spec.options)
    if spec.heads == "lm":
        if options.get("prompt_learning") and options.get("peft_config"):
            raise ConfigError("model.peft_config: the NeMo engine has no adapters or prompt learning; remove peft_config")
        return None
    if spec.heads == "value":
        if options.get("num_value_layers_unfrozen", 0):
            raise ConfigError("method.num_value_layers_unfrozen: the NeMo engine's value head reads the last hidden state; set it to 0")
        if options.get("score_head"):  # a reward model
            return lambda config, vocab: ScoreHead(config.hidden_size)
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


def _owner(module: torch.nn.Module, name: str):
    *path, attr = name.split(".")
    for part in path:
        module = getattr(module, part)
    return module, attr


@torch.no_grad()
def build_reference(policy: torch.nn.Module, make: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """A frozen copy of ``policy`` (this rank's stage and TP slice; no heads): the frozen
    parameters (blocks below ``num_layers_unfrozen``, the embedding) are *shared* with the
    policy, as trlX's hydra branch shares the trunk; the trained ones are copied. Never
    gathers the full model. ``make()`` builds an empty model of the same architecture."""
    from rlkit_nemo.models.sharding import _tensors

    ref = make()
    own, theirs = _tensors(ref), _tensors(policy)
    params = dict(policy.named_parameters())
    for name, tensor in own.items():
        source = theirs[name]
        if name in params and not source.requires_grad and source.device == tensor.device:
            module, attr = _owner(ref, name)
            setattr(module, attr, source)  # the same Parameter: frozen, never updated
        else:
            tensor.copy_(source)
    return ref.eval().requires_grad_(False)


def build_model(model_cfg: dict, vocab: int, weights, spec, *, make_heads: Optional[Callable], cpu: bool,
                device: torch.device, tp: int):
    """(policy, reference or None) for ``spec`` on this rank, the policy on ``device`` with its
    lower blocks frozen. The embedding is padded to Megatron's vocabulary size; padded logits
    are masked (:func:`rlkit_nemo.sliced_loading.mask_padded_vocab`), in the reference too."""
    from rlkit_nemo.sliced_loading import load_weights, mask_padded_vocab
    from rlkit_nemo.model_keys import padded_vocab_size
    from rlkit_nemo.models.from_yaml import build_gpt, transformer_config

    padded = padded_vocab_size(vocab, model_cfg, tp)
    if model_cfg.get("sequence_parallel"):
        model_cfg = dict(model_cfg, sequence_parallel=False)
        log.warning("megatron_cfg.model.sequence_parallel: the NeMo engine samples token by token with the same model, "
                    "which sequence parallelism cannot split; turned off (Transformer Engine's layers stay)")
    # weights about to be overwritten are not initialised (nor is Megatron's full master copy
    # of each matrix made on the CPU); the heads always are
    bare = transformer_config(model_cfg, cpu=cpu, perform_initialization=False)
    module = build_gpt(model_cfg, padded, make_heads=_initialised(make_heads), cpu=cpu,
                       config=bare if weights is not None else None)
    if weights is not None:
        load_weights(module, weights, vocab_size=vocab)  # the heads start fresh
    mask_padded_vocab(module, vocab)
    freeze_lower_layers(module, model_cfg["num_layers"], spec.num_layers_unfrozen)
    module = module.to(device)
    ref = None
    if spec.reference:  # exact at step 0: the initial policy
        ref = build_reference(module, lambda: build_gpt(model_cfg, padded, cpu=cpu, config=bare).to(device))
        mask_padded_vocab(ref, vocab)
    return module, ref


def _initialised(make_heads: Optional[Callable]) -> Optional[Callable]:
    if make_heads is None:
        return None

    def make(config, vocab_size):
        config = copy.copy(config)
        config.perform_initialization = True
        return make_heads(config, vocab_size)

    return make
