"""NeMo checkpoints of trlX's era built from tiny HF models (never downloaded), for the tests.

``write_trlx_llama(hf, folder, tp)`` writes what trlX's ``examples/llama_nemo`` conversion
produced (re-implemented here from its description, not copied): ``mp_rank_XX/model_weights.ckpt``
per TP rank (``model_weights.ckpt`` at TP=1), NeMo 1's GPT names, ``megatron_legacy`` QKV
(each rank's q rows, then its k rows, then its v rows), the gated MLP as ``dense_h_to_4h``
(gate) and ``dense_h_to_4h_2`` (up), no ``model_config.yaml`` (the Megatron YAML describes the
model). ``write_nemo1_gpt2`` writes a NeMo 1 GPT (per-head [q, k, v] rows, ``layernorm1p``
norms stored minus one, tied embedding) with its ``model_config.yaml``, as a folder or a
``.nemo`` archive.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import torch
import yaml

from rlkit_nemo.convert import fuse_qkv

P = "model.language_model."
E = P + "encoder.layers.{}."


def _rows(t, r, tp):
    return t.chunk(tp, dim=0)[r].clone()


def _cols(t, r, tp):
    return t.chunk(tp, dim=1)[r].clone()


def write_trlx_llama(hf, folder, tp: int) -> None:
    c = hf.config
    sd = hf.state_dict()
    assert c.num_key_value_heads == c.num_attention_heads, "trlX's conversion is for multi-head attention"
    for r in range(tp):
        out = {
            P + "embedding.word_embeddings.weight": _rows(sd["model.embed_tokens.weight"], r, tp),
            P + "encoder.final_layernorm.weight": sd["model.norm.weight"].clone(),
            P + "output_layer.weight": _rows(sd["lm_head.weight"], r, tp),
        }
        for i in range(c.num_hidden_layers):
            h, e = f"model.layers.{i}.", E.format(i)
            qkv = [_rows(sd[h + f"self_attn.{x}_proj.weight"], r, tp) for x in "qkv"]
            out.update({
                e + "input_layernorm.weight": sd[h + "input_layernorm.weight"].clone(),
                e + "self_attention.query_key_value.weight": torch.cat(qkv),  # megatron_legacy: [q_r; k_r; v_r]
                e + "self_attention.dense.weight": _cols(sd[h + "self_attn.o_proj.weight"], r, tp),
                e + "post_attention_layernorm.weight": sd[h + "post_attention_layernorm.weight"].clone(),
                e + "mlp.dense_h_to_4h.weight": _rows(sd[h + "mlp.gate_proj.weight"], r, tp),
                e + "mlp.dense_h_to_4h_2.weight": _rows(sd[h + "mlp.up_proj.weight"], r, tp),
                e + "mlp.dense_4h_to_h.weight": _cols(sd[h + "mlp.down_proj.weight"], r, tp),
            })
        path = Path(folder) / (f"mp_rank_{r:02d}" if tp > 1 else "") / "model_weights.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(out, path)


def trlx_llama_yaml_model(hf, fixture: Path, tp: int, *, fp32: bool = True) -> dict:
    """trlX's megatron_llama_cfg.yaml, its sizes overridden to the tiny model's (as trlX's
    conversion script wrote them into the YAML). ``fp32``: precision 32 instead of the YAML's
    bf16 O2, whose bf16 weights put the logits ~0.1 from the fp32 HF model's (0.092 measured
    on the tiny Llama; 2e-6 in fp32), too far to check a conversion against."""
    from rlkit_nemo.megatron_config import load_megatron_cfg

    cfg = load_megatron_cfg(str(fixture))
    c = hf.config
    cfg["model"].update(tensor_model_parallel_size=tp, num_layers=c.num_hidden_layers, hidden_size=c.hidden_size,
                        ffn_hidden_size=c.intermediate_size, num_attention_heads=c.num_attention_heads,
                        max_position_embeddings=c.max_position_embeddings, encoder_seq_length=c.max_position_embeddings,
                        padded_vocab_size=c.vocab_size, layernorm_epsilon=c.rms_norm_eps, micro_batch_size=1, global_batch_size=tp)
    cfg["trainer"].update(devices=tp, num_nodes=1)
    if fp32:
        cfg["trainer"]["precision"] = 32
        cfg["model"]["megatron_amp_O2"] = False
    return cfg


def write_nemo1_gpt2(hf, folder, *, archive: bool = False) -> Path:
    """A NeMo 1 GPT (TP=1) of a tiny HF GPT-2 with layernorm1p norms; returns the folder or the .nemo file."""
    c = hf.config
    sd = hf.state_dict()
    heads, d = c.n_head, c.n_embd // c.n_head
    out = {
        P + "embedding.word_embeddings.weight": sd["transformer.wte.weight"],
        P + "embedding.position_embeddings.weight": sd["transformer.wpe.weight"],
        P + "encoder.final_layernorm.weight": sd["transformer.ln_f.weight"] - 1,
        P + "encoder.final_layernorm.bias": sd["transformer.ln_f.bias"],
        "model.language_model.rotary_pos_emb.inv_freq": torch.ones(3),  # a buffer NeMo saved; not a weight
    }
    for i in range(c.n_layer):
        h, e = f"transformer.h.{i}.", E.format(i)
        qkv_w, qkv_b = sd[h + "attn.c_attn.weight"].t(), sd[h + "attn.c_attn.bias"]
        out.update({
            e + "input_layernorm.weight": sd[h + "ln_1.weight"] - 1, e + "input_layernorm.bias": sd[h + "ln_1.bias"],
            e + "self_attention.query_key_value.weight": fuse_qkv(*qkv_w.chunk(3), heads, heads),  # per head [q; k; v]
            e + "self_attention.query_key_value.bias": fuse_qkv(*qkv_b.chunk(3), heads, heads),
            e + "self_attention.dense.weight": sd[h + "attn.c_proj.weight"].t(), e + "self_attention.dense.bias": sd[h + "attn.c_proj.bias"],
            e + "post_attention_layernorm.weight": sd[h + "ln_2.weight"] - 1, e + "post_attention_layernorm.bias": sd[h + "ln_2.bias"],
            e + "mlp.dense_h_to_4h.weight": sd[h + "mlp.c_fc.weight"].t(), e + "mlp.dense_h_to_4h.bias": sd[h + "mlp.c_fc.bias"],
            e + "mlp.dense_4h_to_h.weight": sd[h + "mlp.c_proj.weight"].t(), e + "mlp.dense_4h_to_h.bias": sd[h + "mlp.c_proj.bias"],
        })
    assert d * heads == c.n_embd
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.clone().contiguous() for k, v in out.items()}, folder / "model_weights.ckpt")
    config = dict(num_layers=c.n_layer, hidden_size=c.n_embd, ffn_hidden_size=4 * c.n_embd, num_attention_heads=heads,
                  encoder_seq_length=c.n_positions, max_position_embeddings=c.n_positions, normalization="layernorm1p",
                  layernorm_epsilon=c.layer_norm_epsilon, activation="gelu", openai_gelu=True, bias=True,
                  share_embeddings_and_output_weights=True, tensor_model_parallel_size=1, precision=32,
                  tokenizer={"library": "megatron", "type": "GPT2BPETokenizer"}, nemo_version="1.20.0")
    (folder / "model_config.yaml").write_text(yaml.safe_dump(config))
    if not archive:
        return folder
    path = folder.with_suffix(".nemo")
    with tarfile.open(path, "w:") as tar:  # NeMo's layout: ./model_config.yaml, ./model_weights.ckpt
        for name in ("model_config.yaml", "model_weights.ckpt"):
            tar.add(folder / name, arcname=f"./{name}")
    return path
