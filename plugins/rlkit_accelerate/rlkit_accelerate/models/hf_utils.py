"""trlX's ``hf_get_*`` helpers (``trlx.utils.modeling``): the pieces of an HF model, found by
structure as ``find_layout`` finds them, so every architecture works (trlX's attribute lists
missed e.g. Llama's decoder). They read the module tree only, so models on the meta device
(``accelerate.init_empty_weights``) work too.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from rlkit_accelerate.models.blocks import find_decoder_blocks


def _first_attribute(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    raise ValueError(f"{type(obj).__name__} has none of the attributes {', '.join(names)}")


def _decoder_model(model: nn.Module) -> nn.Module:
    """The decoder of an encoder-decoder model, else the model itself."""
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False) and hasattr(model, "get_decoder"):
        return model.get_decoder()
    return model


def hf_get_decoder_blocks(model: nn.Module) -> nn.ModuleList:
    """The decoder's transformer blocks, bottom to top (``transformer.h``, ``model.layers``, ``decoder.block``...)."""
    return find_decoder_blocks(_decoder_model(model))[1]


def hf_get_decoder(model: nn.Module) -> nn.Module:
    """The decoder backbone: the module that holds the blocks (``transformer``, ``model.decoder``,
    ``gpt_neox``, Llama's ``model``, T5's ``decoder``)."""
    root = _decoder_model(model)
    name, _ = find_decoder_blocks(root)
    parent = name.rpartition(".")[0]
    return root.get_submodule(parent) if parent else root


def hf_get_decoder_final_norm(model: nn.Module) -> nn.Module:
    """The decoder's final norm: a norm child of the decoder backbone (``ln_f``,
    ``final_layer_norm``, ``norm``), the last one registered after the blocks, else (OPT
    registers it first) the last one that is not the embeddings' norm (Bloom's)."""
    decoder = hf_get_decoder(model)
    blocks = hf_get_decoder_blocks(model)
    before, after, seen_blocks = [], [], False
    for name, child in decoder.named_children():
        if child is blocks:
            seen_blocks = True
        elif "norm" in type(child).__name__.lower():
            (after if seen_blocks else before).append((name, child))
    candidates = after or [(n, c) for n, c in before if "emb" not in n.lower()]
    if not candidates:
        raise ValueError(f"{type(model).__name__}: no final norm found in {type(decoder).__name__}")
    return candidates[-1][1]


def hf_get_lm_head(model: nn.Module) -> nn.Module:
    """The language-modelling head (``get_output_embeddings()``)."""
    return model.get_output_embeddings()


def hf_get_hidden_size(config: Any) -> int:
    """Width of the hidden states (``hidden_size``, ``n_embd`` or ``d_model``)."""
    return _first_attribute(config, ("hidden_size", "n_embd", "d_model"))


def hf_get_num_hidden_layers(config: Any) -> int:
    """Number of (decoder) layers (``num_hidden_layers``, ``n_layer``, T5's ``num_decoder_layers``)."""
    return _first_attribute(config, ("num_hidden_layers", "n_layer", "num_decoder_layers", "num_layers"))
