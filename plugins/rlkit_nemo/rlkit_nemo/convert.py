"""HF <-> Megatron weights for Llama (1, 2, 3) and GPT-2, so a user starts from an HF model and
exports one.

Names and shapes are the *full* (TP=1, PP=1) Megatron state dict of megatron-core's local
layer spec. The layout differences:

* attention: HF keeps q, k, v apart (GPT-2 as one Conv1D, transposed); Megatron fuses them
  into ``linear_qkv`` grouped by query group: for each of the ``g`` KV groups, its query heads,
  then its key head, then its value head — so a TP split of the rows is a split of groups;
* Llama's MLP: ``linear_fc1`` is [gate; up] (Megatron's GLU applies the activation to the
  first half); GPT-2's Conv1D weights are the transpose of a Linear's;
* norms, embeddings, the output layer: renamed only. Megatron's rotary embedding rotates
  halves like HF's Llama, so q and k need no permutation; ``rope_theta`` and ``rope_scaling``
  (Llama 3's ``llama3`` type included) go to :mod:`rlkit_nemo.rope`;
* the vocabulary: Megatron pads the embedding to a multiple of ``make_vocab_size_divisible_by``
  x TP rows (:func:`rlkit_nemo.sliced_loading.load_weights` adds the rows); the export strips them.

:class:`HFWeights` converts one tensor (or one rank's rows or columns of it) when asked, from
an HF state dict or from the safetensors files of an HF folder read lazily, so a rank never
holds the whole HF model; :func:`hf_to_megatron` and :func:`megatron_to_hf` convert whole dicts.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from rlkit_core.errors import ConfigError

from rlkit_nemo.sliced_loading import Source
from rlkit_nemo.rope import rope_settings

Tensors = Dict[str, torch.Tensor]
L = "decoder.layers.{}."


def megatron_model_config(hf_config) -> dict[str, Any]:
    """The Megatron YAML ``model`` keys of an HF Llama or GPT-2 config."""
    kind = getattr(hf_config, "model_type", None)
    c = hf_config
    if kind == "llama":
        if getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False):
            raise ConfigError("model.model_path: a Llama with attention_bias or mlp_bias has no Megatron conversion here")
        theta, scaling = rope_settings(c)
        return dict(
            num_layers=c.num_hidden_layers, hidden_size=c.hidden_size, ffn_hidden_size=c.intermediate_size,
            num_attention_heads=c.num_attention_heads, num_query_groups=c.num_key_value_heads,
            kv_channels=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
            encoder_seq_length=c.max_position_embeddings, max_position_embeddings=c.max_position_embeddings,
            normalization="RMSNorm", layernorm_epsilon=c.rms_norm_eps, activation="swiglu", bias=False,
            position_embedding_type="rope", rotary_base=theta, rope_scaling=scaling,
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


def hf_config_from_megatron(model: dict[str, Any], vocab_size: int):
    """The HF config of a Megatron model section when it is a Llama or a GPT-2 (a NeMo
    checkpoint's model, for the HF export); None for other architectures."""
    from transformers import GPT2Config, LlamaConfig

    heads = model["num_attention_heads"]
    if (model.get("normalization"), model.get("activation"), model.get("bias", True), model.get("position_embedding_type")) == \
            ("RMSNorm", "swiglu", False, "rope") and model.get("rotary_percent", 1.0) == 1.0:
        scaling = dict(model["rope_scaling"]) if model.get("rope_scaling") else None
        return LlamaConfig(
            vocab_size=vocab_size, hidden_size=model["hidden_size"], intermediate_size=model["ffn_hidden_size"],
            num_hidden_layers=model["num_layers"], num_attention_heads=heads,
            num_key_value_heads=model.get("num_query_groups") or heads,
            head_dim=model.get("kv_channels") or model["hidden_size"] // heads,
            max_position_embeddings=model.get("max_position_embeddings", model["encoder_seq_length"]),
            rms_norm_eps=model.get("layernorm_epsilon", 1e-5), rope_theta=float(model.get("rotary_base", 10000)),
            rope_scaling=scaling, tie_word_embeddings=bool(model.get("share_embeddings_and_output_weights", False)),
        )
    activation = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}.get(model.get("activation", "gelu"))
    if (model.get("normalization"), model.get("bias", True), model.get("position_embedding_type", "learned_absolute"),
            model.get("share_embeddings_and_output_weights", True)) == ("LayerNorm", True, "learned_absolute", True) \
            and activation and not model.get("layernorm_zero_centered_gamma") and not model.get("num_query_groups"):
        return GPT2Config(
            vocab_size=vocab_size, n_embd=model["hidden_size"], n_layer=model["num_layers"], n_head=heads,
            n_inner=model.get("ffn_hidden_size"), n_positions=model.get("max_position_embeddings", model["encoder_seq_length"]),
            layer_norm_epsilon=model.get("layernorm_epsilon", 1e-5), activation_function=activation,
        )
    return None


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


class DictReader:
    """An HF state dict with the reads of :class:`rlkit_nemo.sliced_loading.SafetensorsFile`."""

    def __init__(self, state: Tensors):
        self.state = state

    def __contains__(self, name):
        return name in self.state

    def __getitem__(self, name):
        return self.state[name]

    def shape(self, name):
        return tuple(self.state[name].shape)

    def rows(self, name, start, stop):
        return self.state[name][start:stop]


class _Unprefixed:
    """A reader that also finds ``transformer.h.0...`` under ``h.0...`` (GPT-2 checkpoints saved
    from the bare ``GPT2Model`` lack the prefix, as the hub's ``gpt2`` does)."""

    def __init__(self, reader):
        self.reader = reader

    def key(self, name: str) -> str:
        if name not in self.reader:
            for base in ("transformer.", "model."):
                if name.startswith(base) and name[len(base):] in self.reader:
                    return name[len(base):]
        return name

    def __getitem__(self, name):
        return self.reader[self.key(name)]

    def shape(self, name):
        return self.reader.shape(self.key(name))

    def rows(self, name, start, stop):
        return self.reader.rows(self.key(name), start, stop)


class HFWeights(Source):
    """The full Megatron state dict of an HF Llama/GPT-2, one tensor (or slice) at a time.
    ``reader``: an HF state dict (:class:`DictReader`) or :class:`rlkit_nemo.sliced_loading.SafetensorsFile`."""

    def __init__(self, reader, hf_config):
        self.r, self.config = _Unprefixed(reader), hf_config
        model = megatron_model_config(hf_config)
        self.heads, self.groups, self.d = _heads(model)
        self.hidden = model["hidden_size"]
        top, layer, prefix = _layout(hf_config)
        # Megatron name -> (how, HF name(s), Conv1D)
        self.table: dict[str, tuple[str, Any, bool]] = {mg: ("rename", hf, False) for hf, mg in top.items()}
        if not model["share_embeddings_and_output_weights"]:
            self.table["output_layer.weight"] = ("rename", "lm_head.weight", False)
        llama = hf_config.model_type == "llama"
        for i in range(model["num_layers"]):
            h, m = prefix.format(i), L.format(i)
            self.table.update({m + mg: ("rename", h + name, conv1d) for name, (mg, conv1d) in layer.items()})
            if llama:
                self.table[m + "self_attention.linear_qkv.weight"] = ("qkv", h + "self_attn.", False)
                self.table[m + "mlp.linear_fc1.weight"] = ("glu", (h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"), False)
            else:
                for part in ("weight", "bias"):
                    self.table[m + f"self_attention.linear_qkv.{part}"] = ("c_attn", h + f"attn.c_attn.{part}", part == "weight")

    def names(self):
        return self.table.keys()

    def has(self, name):
        return name in self.table

    def shape(self, name):
        how, hf, conv1d = self.table[name]
        if how == "rename":
            shape = self.r.shape(hf)
            return tuple(reversed(shape)) if conv1d else tuple(shape)
        if how == "glu":
            gate = self.r.shape(hf[0])
            return (2 * gate[0], *gate[1:])
        rows = (self.heads + 2 * self.groups) * self.d
        return (rows, self.hidden) if how == "qkv" or conv1d else (rows,)

    def full(self, name):
        return self.rows(name, 0, self.shape(name)[0])

    def rows(self, name, start, stop):
        how, hf, conv1d = self.table[name]
        if how == "rename":
            return self.r[hf].t()[start:stop] if conv1d else self.r.rows(hf, start, stop)
        if how == "glu":  # [gate; up]: a range may take from either half
            half = self.r.shape(hf[0])[0]
            parts = [self.r.rows(hf[0], start, min(stop, half)) if start < half else None,
                     self.r.rows(hf[1], max(start - half, 0), stop - half) if stop > half else None]
            return torch.cat([p for p in parts if p is not None])
        per_group = (self.heads // self.groups + 2) * self.d
        if how == "qkv" and start % per_group == 0 and stop % per_group == 0:  # whole groups: read only theirs
            g0, g1 = start // per_group, stop // per_group
            q_rows = self.heads // self.groups * self.d
            q = self.r.rows(hf + "q_proj.weight", g0 * q_rows, g1 * q_rows)
            k, v = (self.r.rows(hf + f"{x}_proj.weight", g0 * self.d, g1 * self.d) for x in "kv")
            return fuse_qkv(q, k, v, (g1 - g0) * self.heads // self.groups, g1 - g0)
        return self._fused(name)[start:stop]

    def cols(self, name, start, stop):
        how, hf, conv1d = self.table[name]
        if how == "rename" and conv1d:  # a Conv1D's input dimension is its first
            return self.r.rows(hf, start, stop).t()
        return self.full(name)[:, start:stop]

    def _fused(self, name):
        how, hf, conv1d = self.table[name]
        if how == "qkv":
            q, k, v = (self.r[hf + f"{x}_proj.weight"] for x in "qkv")
            return fuse_qkv(q, k, v, self.heads, self.groups)
        qkv = self.r[hf].t() if conv1d else self.r[hf]  # GPT-2: (3H, ...) = [q; k; v]
        return fuse_qkv(*qkv.chunk(3), self.heads, self.groups)


def hf_to_megatron(hf: Tensors, hf_config) -> Tensors:
    """An HF Llama/GPT-2 state dict -> the full Megatron state dict of ``megatron_model_config``."""
    weights = HFWeights(DictReader(hf), hf_config)
    return {name: weights.full(name).detach().clone().contiguous() for name in weights.names()}


def megatron_to_hf(full: Tensors, hf_config) -> Tensors:
    """A full Megatron state dict (local or TE names; its vocabulary padding is stripped) -> an
    HF Llama/GPT-2 state dict (``load_state_dict``-ready)."""
    from rlkit_nemo.te import te_to_local

    full = te_to_local(full)
    hf = top_to_hf(full, hf_config)
    for i in range(megatron_model_config(hf_config)["num_layers"]):
        hf.update(layer_to_hf(full, i, hf_config))
    return {k: v.detach().clone().contiguous() for k, v in hf.items()}


def layer_to_hf(full: Tensors, i: int, hf_config) -> Tensors:
    """Layer ``i`` of a Megatron state dict (full names, local spec; other tensors may be
    absent) -> its HF tensors, views where a rename suffices."""
    heads, groups, d = _heads(megatron_model_config(hf_config))
    _, layer, prefix = _layout(hf_config)
    h, m = prefix.format(i), L.format(i)
    hf = {h + name: _t(full[m + mg], conv1d) for name, (mg, conv1d) in layer.items()}
    if hf_config.model_type == "llama":
        a = h + "self_attn."
        q, k, v = split_qkv(full[m + "self_attention.linear_qkv.weight"], heads, groups, d)
        hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"] = q, k, v
        hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"] = full[m + "mlp.linear_fc1.weight"].chunk(2)
    else:
        for part in ("weight", "bias"):
            qkv = torch.cat(split_qkv(full[m + f"self_attention.linear_qkv.{part}"], heads, groups, d))
            hf[h + f"attn.c_attn.{part}"] = _t(qkv, part == "weight")
    return hf


def top_to_hf(full: Tensors, hf_config, *, lm_head: bool = True) -> Tensors:
    """The whole-model tensors ``full`` holds (embeddings, final norm, output layer) -> HF's,
    the vocabulary padding stripped. ``lm_head``: also ``lm_head.weight`` (the embedding when
    tied), which an HF folder of a tied model leaves out."""
    top, _, _ = _layout(hf_config)
    hf: Tensors = {name: full[mg] for name, mg in top.items() if mg in full}
    tied = megatron_model_config(hf_config)["share_embeddings_and_output_weights"]
    source = "embedding.word_embeddings.weight" if tied else "output_layer.weight"
    if lm_head and source in full:
        hf["lm_head.weight"] = full[source]
    embedding = next(name for name, mg in top.items() if mg == "embedding.word_embeddings.weight")
    for name in (embedding, "lm_head.weight"):
        if name in hf:
            hf[name] = hf[name][: hf_config.vocab_size]  # Megatron's vocabulary padding
    return hf


def _t(w: torch.Tensor, conv1d: bool) -> torch.Tensor:
    return w.t() if conv1d else w  # GPT-2's Conv1D stores (in, out)


def hf_source(folder_or_state, hf_config) -> Optional[HFWeights]:
    """:class:`HFWeights` over an HF folder's safetensors (read lazily) or a state dict; None
    for a folder without safetensors."""
    from rlkit_nemo.sliced_loading import SafetensorsFile

    if isinstance(folder_or_state, dict):
        return HFWeights(DictReader(folder_or_state), hf_config)
    files = SafetensorsFile.from_folder(folder_or_state)
    return None if files is None else HFWeights(files, hf_config)
