"""The ``model`` section of a NeMo 1 Megatron YAML (trlX's ``configs/nemo_configs``) in the
keys and values rlkit's model builder reads (:func:`rlkit_nemo.models.from_yaml.transformer_config`).

NeMo 1 spelled several settings its own way: ``normalization: layernorm1p`` (a LayerNorm whose
weight is stored minus one), ``activation: fast-swiglu``, ``position_embedding_type: rope``,
``rotary_percentage``. They become megatron-core's names here. Settings that change only speed
or numerics NeMo 1 had no equivalent for in megatron-core (``apply_query_key_layer_scaling``,
``persist_layer_norm``, the fusion flags, ``grad_div_ar_fusion``...) are read and dropped.

Sequence parallelism and Transformer Engine (TE) are honoured where the hardware and the
parallel layout allow and otherwise turned off with one warning line each:

* TE's layers (``transformer_engine: true``; megatron-core's TE layer spec, fused attention,
  FP8) need TE installed and a GPU, and are used only when the YAML asks for them (NeMo 1's
  default was off, and TE's attention takes no padding mask in megatron-core's cached decoding,
  see docs/nemo.md);
* ``sequence_parallel`` splits activations over the TP ranks: it needs TP > 1 and TE's layers
  (the plain-torch norms of the local spec cannot run it);
* ``fp8`` needs TE's layers.
Pure Python: no torch, no megatron import.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from rlkit_core.errors import ConfigError

WHERE = "megatron_cfg.model"
NORMALIZATIONS = {  # NeMo 1 -> (megatron-core name, zero-centred gamma)
    "layernorm": ("LayerNorm", False), "LayerNorm": ("LayerNorm", False),
    "layernorm1p": ("LayerNorm", True),
    "rmsnorm": ("RMSNorm", False), "RMSNorm": ("RMSNorm", False),
}
ACTIVATIONS = {  # NeMo 1 -> rlkit's (models.build.ACTIVATIONS)
    "gelu": "gelu", "gelu_tanh": "gelu_tanh", "relu": "relu", "squared-relu": "squared_relu",
    "swiglu": "swiglu", "fast-swiglu": "swiglu", "geglu": "geglu", "fast-geglu": "geglu",
    "reglu": "reglu", "fast-reglu": "reglu",
}
POSITIONS = {"learned_absolute": "learned_absolute", "learned": "learned_absolute", "rope": "rope", "rotary": "rope"}
UNSUPPORTED = {  # key -> (value that is fine, why the others are refused)
    "transformer_block_type": ("pre_ln", "rlkit-nemo's models are pre-LN transformers"),
    "headscale": (False, "head scaling has no megatron-core equivalent"),
    "attention_type": ("multihead", "only multi-head attention is built"),
}
FP8_KEYS = {"fp8_margin": "fp8_margin", "fp8_interval": "fp8_interval", "fp8_amax_history_len": "fp8_amax_history_len",
            "fp8_amax_compute_algo": "fp8_amax_compute_algo"}


def te_usable(cpu: bool) -> bool:
    """Transformer Engine installed, on a GPU run."""
    return not cpu and importlib.util.find_spec("transformer_engine") is not None


def _choice(model: dict, key: str, table: dict, default: Any) -> Any:
    value = model.get(key, default)
    if value is None:
        value = default
    if value not in table:
        raise ConfigError(f"{WHERE}.{key}: {value!r} is not one of {', '.join(map(repr, table))}")
    return table[value]


def normalize_model(model: dict[str, Any], *, tp: int, te: bool) -> tuple[dict[str, Any], list[str]]:
    """(the model section in rlkit's keys, the warning lines). ``te``: Transformer Engine is
    usable here (installed, GPU)."""
    out, warnings = dict(model), []
    for key, (fine, why) in UNSUPPORTED.items():
        if model.get(key, fine) not in (fine, None):
            raise ConfigError(f"{WHERE}.{key}: {model[key]!r} is not supported ({why}); use {fine!r}")
    out["normalization"], zero_centred = _choice(model, "normalization", NORMALIZATIONS, "layernorm")
    out["layernorm_zero_centered_gamma"] = zero_centred
    activation = _choice(model, "activation", ACTIVATIONS, "gelu")
    if activation == "gelu" and model.get("openai_gelu"):
        activation = "gelu_tanh"  # NeMo's openai_gelu is the tanh approximation
    out["activation"] = activation
    out["position_embedding_type"] = _choice(model, "position_embedding_type", POSITIONS, "learned_absolute")
    if "rotary_percentage" in model:
        out["rotary_percent"] = float(model["rotary_percentage"])
    if model.get("megatron_legacy"):
        out["megatron_legacy"] = True  # only the layout of a NeMo checkpoint's QKV (rlkit_nemo.nemo_checkpoint)

    # Transformer Engine when asked for (NeMo 1's default: off), then what needs it
    wants_te = bool(model.get("transformer_engine", False))
    use_te = te and wants_te
    if wants_te and not te:
        warnings.append(f"{WHERE}.transformer_engine: Transformer Engine needs a GPU and the transformer_engine "
                        f"package, not available here; turned off (megatron-core's local layers instead)")
    sp = bool(model.get("sequence_parallel", False))
    if sp and tp == 1:
        warnings.append(f"{WHERE}.sequence_parallel: needs tensor_model_parallel_size > 1 (here 1); turned off")
        sp = False
    elif sp and not use_te:
        reason = ("the YAML does not ask for them (transformer_engine: true; NeMo 1's default is false)" if te
                  else "Transformer Engine is not available here (no GPU or no transformer_engine)")
        warnings.append(f"{WHERE}.sequence_parallel: needs Transformer Engine layers and {reason}; turned off")
        sp = False
    out["sequence_parallel"], out["transformer_engine"] = sp, use_te
    fp8 = model.get("fp8", False)
    if fp8 and not use_te:
        warnings.append(f"{WHERE}.fp8: needs Transformer Engine layers on a GPU, not in use here; turned off")
        fp8 = False
    out["fp8"] = None if not fp8 else ("e4m3" if model.get("fp8_e4m3") else "hybrid")
    for nemo_key, ours in FP8_KEYS.items():
        if fp8 and nemo_key in model:
            out[ours] = model[nemo_key]
    return out, warnings


def padded_vocab_size(vocab_size: int, model: dict[str, Any], tp: int) -> int:
    """The embedding's rows: the YAML's ``padded_vocab_size``, else ``vocab_size`` rounded up to
    a multiple of ``make_vocab_size_divisible_by`` x TP (Megatron's rule; 1 when the YAML does
    not set it, so each TP rank holds an equal slice)."""
    padded = model.get("padded_vocab_size")
    multiple = int(model.get("make_vocab_size_divisible_by") or 1) * tp
    if padded:
        if padded < vocab_size or padded % tp:
            raise ConfigError(f"{WHERE}.padded_vocab_size: {padded} must be >= the vocabulary ({vocab_size}) and "
                              f"divisible by tensor_model_parallel_size={tp}; remove it to pad automatically")
        return int(padded)
    return -(-vocab_size // multiple) * multiple
