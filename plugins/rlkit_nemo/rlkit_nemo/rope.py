"""Rotary position embeddings as HF Llama computes them: ``rope_theta`` and ``rope_scaling``
(``linear``, and Llama 3.1's ``llama3`` with its four parameters).

megatron-core's ``RotaryEmbedding`` takes a base and, for Llama 3, a scaling *factor* only: its
``low_freq_factor``, ``high_freq_factor`` and ``original_max_position_embeddings`` are fixed at
Llama 3.1's 1, 4 and 8192. A model whose values differ (a Llama 3.2, or a tiny test model)
would rotate with wrong frequencies, so after building the model :func:`apply_rope` sets the
inverse frequencies computed here from every parameter the HF config has.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import torch

from rlkit_core.errors import ConfigError

LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def rope_settings(hf_config) -> tuple[float, Optional[dict[str, Any]]]:
    """(theta, scaling or None) of an HF config: transformers 4 keeps ``rope_theta`` and
    ``rope_scaling`` on the config, transformers 5 both in ``rope_parameters``."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    scaling = getattr(hf_config, "rope_scaling", None) or params
    scaling = dict(scaling or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        scaling = None
    elif kind == "linear":
        scaling = {"rope_type": "linear", "factor": float(scaling["factor"])}
    elif kind == "llama3":
        missing = [k for k in LLAMA3_KEYS if k not in scaling]
        if missing:
            raise ConfigError(f"model.model_path: rope_scaling of type llama3 lacks {', '.join(missing)}")
        scaling = {"rope_type": "llama3", **{k: float(scaling[k]) for k in LLAMA3_KEYS}}
    else:
        raise ConfigError(f"model.model_path: rope_scaling type {kind!r} has no Megatron conversion; "
                          f"rlkit-nemo converts default, linear and llama3")
    return float(theta if theta is not None else 10000.0), scaling


def inverse_frequencies(dim: int, theta: float, scaling: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """(dim / 2,) float32: ``1 / theta^(2i / dim)``, then the scaling, as HF Llama computes it."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if not scaling:
        return inv
    if scaling["rope_type"] == "linear":
        return inv / scaling["factor"]
    factor, low, high, old = (scaling[k] for k in LLAMA3_KEYS)
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    # long wavelengths are divided by the factor, short ones kept, the band between blended
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled)


def apply_rope(model: torch.nn.Module, model_cfg: Mapping[str, Any]) -> None:
    """Give ``model``'s rotary embedding the inverse frequencies of ``model_cfg``'s
    ``rotary_base`` and ``rope_scaling`` (a no-op for a model without rotary embeddings)."""
    rotary = getattr(model, "rotary_pos_emb", None)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        return
    dim = 2 * rotary.inv_freq.numel()
    inv = inverse_frequencies(dim, float(model_cfg.get("rotary_base", 10000)), model_cfg.get("rope_scaling"))
    rotary.inv_freq = inv.to(rotary.inv_freq.device)
    rotary.forward.cache_clear()  # megatron caches the embeddings per length
