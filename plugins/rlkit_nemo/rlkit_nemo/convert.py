"""HF <-> Megatron weights for Llama and GPT-2, so a user starts from an HF model and exports one.

Both directions work on *full* state dicts (TP=1, PP=1 names and shapes; see
:mod:`rlkit_nemo.models.sharding` for splitting them over ranks). The layout differences:

* attention: HF keeps q, k, v apart (GPT-2 as one Conv1D, transposed); Megatron fuses them
  into ``linear_qkv`` grouped by query group: for each of the ``g`` KV groups, its query heads,
  then its key head, then its value head — so a TP split of the rows is a split of groups;
* Llama's MLP: ``linear_fc1`` is [gate; up] (Megatron's GLU applies the activation to the
  first half); GPT-2's Conv1D weights are the transpose of a Linear's;
* norms, embeddings, the output layer: renamed only. Megatron's rotary embedding rotates
  halves like HF's Llama, so q and k need no permutation.
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from rlkit_core.errors import ConfigError

Tensors = Dict[str, torch.Tensor]
L = "decoder.layers.{}."


def megatron_model_config(hf_config) -> dict[str, Any]:
    """The Megatron YAML ``model`` keys of an HF Llama or GPT-2 config."""
    kind = getattr(hf_config, "model_type", None)
    c = hf_config
    if kind == "llama":
        return dict(
            num_layers=c.num_hidden_layers, hidden_size=c.hidden_size, ffn_hidden_size=c.intermediate_size,
            num_attention_heads=c.num_attention_heads, num_query_groups=c.num_key_value_heads,
            kv_channels=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
            encoder_seq_length=c.max_position_embeddings, max_position_embeddings=c.max_position_embeddings,
            normalization="RMSNorm", layernorm_epsilon=c.rms_norm_eps, activation="swiglu", bias=False,
            position_embedding_type="rope", rotary_base=int(getattr(c, "rope_theta", 10000)),
            share_embeddings_and_output_weights=bool(c.tie_word_embeddings),
        )
    if kind == "gpt2":
        return dict(
            num_layers=c.n_layer, hidden_size=c.n_embd, ffn_hidden_size=c.n_inner or 4 * c.n_embd,
            num_attention_heads=c.n_head, encoder_seq_length=c.n_positions, max_position_embeddings=c.n_positions,
            normalization="LayerNorm", layernorm_epsilon=c.layer_norm_epsilon, activation="gelu_tanh", bias=True,
            position_embedding_type="learned_absolute", share_embeddings_and_output_weights=True,
        )
    raise ConfigError(f"model.model_path: HF model type {kind!r} has no Megatron conversion; rlkit-nemo converts llama and gpt2")


def _heads(model: dict) -> tuple[int, int, int]:
    heads = model["num_attention_heads"]
    groups = model.get("num_query_groups") or heads
    return heads, groups, model.get("kv_channels") or model["hidden_size"] // heads


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, groups: int) -> torch.Tensor:
    """q (heads*d, ...), k and v (groups*d, ...) -> Megatron's grouped [q_g; k_g; v_g] rows."""
    rest = q.shape[1:]
    q = q.reshape(groups, -1, *rest)  # (g, heads/g * d, ...)
    k, v = k.reshape(groups, -1, *rest), v.reshape(groups, -1, *rest)  # (g, d, ...)
    return torch.cat([q, k, v], dim=1).reshape(-1, *rest)


def split_qkv(qkv: torch.Tensor, heads: int, groups: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of :func:`fuse_qkv`."""
    rest = qkv.shape[1:]
    per_group = qkv.reshape(groups, (heads // groups + 2) * d, *rest)
    q, k, v = per_group.split([heads // groups * d, d, d], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


# per-layer tensors that are only renamed: HF name -> (Megatron name, is a GPT-2 Conv1D weight)
LLAMA_LAYER = {
    "input_layernorm.weight": ("input_layernorm.weight", False),
    "self_attn.o_proj.weight": ("self_attention.linear_proj.weight", False),
    "post_attention_layernorm.weight": ("pre_mlp_layernorm.weight", False),
    "mlp.down_proj.weight": ("mlp.linear_fc2.weight", False),
}
GPT2_LAYER = {
    f"{hf}.{part}": (f"{mg}.{part}", part == "weight" and conv1d)
    for hf, mg, conv1d in (
        ("ln_1", "input_layernorm", False), ("ln_2", "pre_mlp_layernorm", False),
        ("attn.c_proj", "self_attention.linear_proj", True), ("mlp.c_fc", "mlp.linear_fc1", True),
        ("mlp.c_proj", "mlp.linear_fc2", True),
    )
    for part in ("weight", "bias")
}
# whole-model tensors: HF name -> Megatron name
LLAMA_TOP = {"model.embed_tokens.weight": "embedding.word_embeddings.weight", "model.norm.weight": "decoder.final_layernorm.weight"}
GPT2_TOP = {
    "transformer.wte.weight": "embedding.word_embeddings.weight",
    "transformer.wpe.weight": "embedding.position_embeddings.weight",
    "transformer.ln_f.weight": "decoder.final_layernorm.weight",
    "transformer.ln_f.bias": "decoder.final_layernorm.bias",
}


def _layout(hf_config):
    """(top-level renames, per-layer renames, HF layer prefix) of a supported model type."""
    if hf_config.model_type == "llama":
        return LLAMA_TOP, LLAMA_LAYER, "model.layers.{}."
    return GPT2_TOP, GPT2_LAYER, "transformer.h.{}."


def _t(w: torch.Tensor, conv1d: bool) -> torch.Tensor:
    return w.t() if conv1d else w  # GPT-2's Conv1D stores (in, out)


def hf_to_megatron(hf: Tensors, hf_config) -> Tensors:
    """An HF Llama/GPT-2 state dict -> the full Megatron state dict of ``megatron_model_config``."""
    model = megatron_model_config(hf_config)
    heads, groups, _ = _heads(model)
    top, layer, prefix = _layout(hf_config)
    out: Tensors = {mg: hf[name] for name, mg in top.items()}
    for i in range(model["num_layers"]):
        h, m = prefix.format(i), L.format(i)
        out.update({m + mg: _t(hf[h + name], conv1d) for name, (mg, conv1d) in layer.items()})
        if hf_config.model_type == "llama":
            a = h + "self_attn."
            q, k, v = (hf[a + f"{x}_proj.weight"] for x in "qkv")
            out[m + "self_attention.linear_qkv.weight"] = fuse_qkv(q, k, v, heads, groups)
            out[m + "mlp.linear_fc1.weight"] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
        else:
            for part in ("weight", "bias"):
                qkv = _t(hf[h + f"attn.c_attn.{part}"], part == "weight")  # (3H, ...) = [q; k; v]
                out[m + f"self_attention.linear_qkv.{part}"] = fuse_qkv(*qkv.chunk(3), heads, groups)
    if not model["share_embeddings_and_output_weights"]:
        out["output_layer.weight"] = hf["lm_head.weight"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def megatron_to_hf(full: Tensors, hf_config) -> Tensors:
    """A full Megatron state dict -> an HF Llama/GPT-2 state dict (``load_state_dict``-ready)."""
    model = megatron_model_config(hf_config)
    heads, groups, d = _heads(model)
    top, layer, prefix = _layout(hf_config)
    hf: Tensors = {name: full[mg] for name, mg in top.items()}
    for i in range(model["num_layers"]):
        h, m = prefix.format(i), L.format(i)
        hf.update({h + name: _t(full[m + mg], conv1d) for name, (mg, conv1d) in layer.items()})
        if hf_config.model_type == "llama":
            a = h + "self_attn."
            q, k, v = split_qkv(full[m + "self_attention.linear_qkv.weight"], heads, groups, d)
            hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"] = q, k, v
            hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"] = full[m + "mlp.linear_fc1.weight"].chunk(2)
        else:
            for part in ("weight", "bias"):
                qkv = torch.cat(split_qkv(full[m + f"self_attention.linear_qkv.{part}"], heads, groups, d))
                hf[h + f"attn.c_attn.{part}"] = _t(qkv, part == "weight")
    tied = model["share_embeddings_and_output_weights"]
    hf["lm_head.weight"] = full["embedding.word_embeddings.weight" if tied else "output_layer.weight"]
    return {k: v.detach().clone().contiguous() for k, v in hf.items()}
