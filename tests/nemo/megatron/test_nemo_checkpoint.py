"""NeMo checkpoints of trlX's era load (``.nemo`` archives, ``model_weights.ckpt`` folders,
``mp_rank_XX`` shards, NeMo 1 and megatron-core names, megatron_legacy QKV, layernorm1p), the
NeMo layout rlkit writes reloads exactly, and the TE <-> local weight names map both ways.
One process (TP=1); TP=2 is checkpoint_tp2_worker.py's."""

from pathlib import Path

import pytest
import torch

from nemo_fixtures import trlx_llama_yaml_model, write_nemo1_gpt2, write_trlx_llama

pytestmark = pytest.mark.usefixtures("megatron_cpu")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"


def tp1():
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(0)
    return ps


def tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, max_position_embeddings=64, tie_word_embeddings=False, initializer_range=0.2)
    return LlamaForCausalLM(config).eval()


def tiny_gpt2(seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=32)).eval()


def load(yaml_model, path, vocab=64):
    """(model, model section) from ``path`` as the engine loads it: model_source + build_model."""
    from rlkit_core.engine import ModelSpec
    from rlkit_nemo.build import build_model, model_source

    model_cfg, vocab, weights, hf_config = model_source(yaml_model, str(path), vocab)
    module, _ = build_model(model_cfg, vocab, weights, ModelSpec(heads="lm"), make_heads=None, cpu=True,
                            device=torch.device("cpu"), tp=1)
    return module.eval(), model_cfg, hf_config


def logits(model, ids):
    from rlkit_nemo.models.gpt import causal_padding_mask

    with torch.no_grad():
        return model(ids, torch.arange(ids.shape[1]).repeat(ids.shape[0], 1), causal_padding_mask(torch.ones_like(ids)))


IDS = torch.randint(0, 64, (2, 20), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("shards", [1, 2])
def test_a_trlx_llama_checkpoint_loads_with_trlxs_yaml(tmp_path, shards):
    """trlX's Llama conversion (megatron_legacy QKV, mp_rank_XX per TP rank, no model_config.yaml)
    with trlX's megatron_llama_cfg.yaml: the Megatron model's logits are the HF model's; at TP=1
    a TP=2 checkpoint is merged per tensor."""
    from rlkit_nemo.megatron_config import translate

    tp1()
    hf = tiny_llama()
    write_trlx_llama(hf, tmp_path / "ckpt", tp=shards)
    cfg = trlx_llama_yaml_model(hf, FIXTURES / "megatron_llama_cfg.yaml", tp=1)
    model, _, hf_config = load(translate(cfg, cpu=True)["model"], tmp_path / "ckpt")
    with torch.no_grad():
        expected = hf(input_ids=IDS).logits
    assert (logits(model, IDS) - expected).abs().max() < 1e-4
    assert hf_config.model_type == "llama"  # a Llama-shaped NeMo model exports to HF
    # with the YAML's own bf16 O2 the weights are the same values, rounded to bf16
    bf16 = trlx_llama_yaml_model(hf, FIXTURES / "megatron_llama_cfg.yaml", tp=1, fp32=False)
    model, _, _ = load(translate(bf16, cpu=True)["model"], tmp_path / "ckpt")
    assert model.embedding.word_embeddings.weight.dtype == torch.bfloat16
    assert torch.equal(model.embedding.word_embeddings.weight, hf.model.embed_tokens.weight.to(torch.bfloat16))
    assert torch.equal(model.decoder.layers[1].mlp.linear_fc2.weight, hf.model.layers[1].mlp.down_proj.weight.to(torch.bfloat16))


@pytest.mark.parametrize("archive", [False, True])
def test_a_nemo1_gpt_with_layernorm1p_loads_from_a_folder_or_a_nemo_archive(tmp_path, archive):
    from rlkit_nemo.megatron_config import translate

    tp1()
    hf = tiny_gpt2()
    path = write_nemo1_gpt2(hf, tmp_path / "gpt", archive=archive)
    assert path.name.endswith(".nemo") is archive
    yaml_model = translate("megatron_tiny_cpu.yaml", cpu=True)["model"]
    yaml_model.update(tensor_model_parallel_size=1)
    model, model_cfg, hf_config = load(yaml_model, path)
    assert model_cfg["num_layers"] == 2 and model_cfg["activation"] == "gelu_tanh"  # the checkpoint's architecture
    with torch.no_grad():
        expected = hf(input_ids=IDS).logits
    assert (logits(model, IDS) - expected).abs().max() < 1e-4  # norms: the stored w - 1, plus one
    # the local spec's plain LayerNorms hold w + 1: a GPT-2, which exports to HF's names
    from rlkit_nemo.convert import megatron_to_hf
    from rlkit_nemo.models.sharding import full_state_dict

    assert hf_config.model_type == "gpt2"
    exported = megatron_to_hf(full_state_dict(model), hf_config)
    original = {k: v for k, v in hf.state_dict().items() if not k.endswith(".attn.bias")}
    assert set(exported) == set(original)
    assert all(torch.allclose(exported[k], original[k], atol=1e-6, rtol=0) for k in original)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_nemo_layout_rlkit_saves_reloads_exactly(tmp_path, kind):
    import yaml

    from rlkit_nemo.convert import HFWeights, DictReader, megatron_model_config
    from rlkit_nemo.sliced_loading import load_weights
    from rlkit_nemo.models.from_yaml import build_gpt
    from rlkit_nemo.models.sharding import _tensors
    from rlkit_nemo.nemo_checkpoint import save_nemo

    ps = tp1()
    hf = tiny_llama() if kind == "llama" else tiny_gpt2()
    model_cfg = dict(megatron_model_config(hf.config), tensor_model_parallel_size=1, make_vocab_size_divisible_by=48)
    saved = build_gpt(model_cfg, 96, cpu=True)  # the vocabulary padded from 64 to 96 rows
    load_weights(saved, HFWeights(DictReader(hf.state_dict()), hf.config), vocab_size=64)
    save_nemo(tmp_path / "nemo", saved, model_cfg, ps, is_main=True)
    assert (tmp_path / "nemo" / "model_weights.ckpt").is_file()
    written = yaml.safe_load((tmp_path / "nemo" / "model_config.yaml").read_text())
    assert written["padded_vocab_size"] == 96 and written["normalization"] == ("rmsnorm" if kind == "llama" else "layernorm")
    names = torch.load(tmp_path / "nemo" / "model_weights.ckpt", weights_only=True)
    assert all(k.startswith("model.language_model.") for k in names)  # NeMo 1's names, as trlX's loader reads them
    if kind == "llama":
        assert "model.language_model.encoder.layers.0.mlp.dense_h_to_4h_2.weight" in names
    yaml_model = dict(model_cfg, activation="nonsense")  # the architecture comes from model_config.yaml
    reloaded, _, hf_config = load({k: yaml_model[k] for k in ("tensor_model_parallel_size", "make_vocab_size_divisible_by")},
                                  tmp_path / "nemo")
    mine, theirs = _tensors(saved), _tensors(reloaded)
    assert set(mine) == set(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert hf_config.model_type == kind


def test_megatron_core_names_with_te_fused_norms_load(tmp_path):
    """A NeMo 2 / mcore checkpoint (model.decoder..., TE's layer_norm_weight names, _extra_state)."""
    from rlkit_nemo.convert import hf_to_megatron
    from rlkit_nemo.megatron_config import translate
    from rlkit_nemo.te import local_to_te

    tp1()
    hf = tiny_gpt2()
    full = local_to_te(hf_to_megatron(hf.state_dict(), hf.config))
    full.update({"decoder.layers.0.self_attention.linear_qkv._extra_state": None})
    (tmp_path / "mcore").mkdir()
    torch.save({"model." + k: v for k, v in full.items()}, tmp_path / "mcore" / "model_weights.ckpt")
    yaml_model = translate("megatron_tiny_cpu.yaml", cpu=True)["model"]
    yaml_model.update(tensor_model_parallel_size=1, activation="gelu_tanh", num_layers=2, hidden_size=32, ffn_hidden_size=128,
                      num_attention_heads=4, encoder_seq_length=32, max_position_embeddings=32)
    model, _, _ = load(yaml_model, tmp_path / "mcore")
    with torch.no_grad():
        expected = hf(input_ids=IDS).logits
    assert (logits(model, IDS) - expected).abs().max() < 1e-4


def test_a_checkpoint_of_another_model_is_one_line(tmp_path):
    from rlkit_core.errors import RlkitError
    from rlkit_nemo.megatron_config import translate

    tp1()
    hf = tiny_llama()
    write_trlx_llama(hf, tmp_path / "ckpt", tp=1)
    cfg = trlx_llama_yaml_model(hf, FIXTURES / "megatron_llama_cfg.yaml", tp=1)
    cfg["model"]["ffn_hidden_size"] = 40
    with pytest.raises(RlkitError) as err:
        load(translate(cfg, cpu=True)["model"], tmp_path / "ckpt")
    assert "describe different models" in str(err.value) and "\n" not in str(err.value)


def test_te_and_local_names_map_both_ways():
    from rlkit_nemo.te import local_name, local_to_te, te_name, te_to_local

    local = {
        "decoder.layers.3.input_layernorm.weight": 1, "decoder.layers.3.input_layernorm.bias": 2,
        "decoder.layers.3.pre_mlp_layernorm.weight": 3, "decoder.layers.3.pre_mlp_layernorm.bias": 4,
        "decoder.layers.3.self_attention.linear_qkv.weight": 5, "decoder.layers.3.mlp.linear_fc1.weight": 6,
        "decoder.final_layernorm.weight": 7, "embedding.word_embeddings.weight": 8,
    }
    te = local_to_te(local)
    assert te["decoder.layers.3.self_attention.linear_qkv.layer_norm_weight"] == 1
    assert te["decoder.layers.3.self_attention.linear_qkv.layer_norm_bias"] == 2
    assert te["decoder.layers.3.mlp.linear_fc1.layer_norm_weight"] == 3
    assert te["decoder.layers.3.mlp.linear_fc1.layer_norm_bias"] == 4
    assert te["decoder.final_layernorm.weight"] == 7  # TE's final norm keeps its name
    assert len(te) == len(local)
    with_state = dict(te, **{"decoder.layers.3.self_attention.linear_qkv._extra_state": object()})
    assert te_to_local(with_state) == local
    assert local_name(te_name("decoder.layers.0.pre_mlp_layernorm.bias")) == "decoder.layers.0.pre_mlp_layernorm.bias"
    assert te_name("model.decoder.layers.12.input_layernorm.weight") == "model.decoder.layers.12.self_attention.linear_qkv.layer_norm_weight"


def test_an_export_folder_with_hf_and_nemo_files_loads_the_hf_weights(tmp_path):
    """save_pretrained writes both layouts into one folder; a later run reads the HF files."""
    from rlkit_nemo.build import model_source
    from rlkit_nemo.convert import HFWeights
    from rlkit_nemo.megatron_config import translate
    from rlkit_nemo.nemo_checkpoint import NeMoWeights, save_nemo

    ps = tp1()
    hf = tiny_gpt2()
    nemo = write_nemo1_gpt2(hf, tmp_path / "nemo")
    yaml_model = dict(translate("megatron_tiny_cpu.yaml", cpu=True)["model"], tensor_model_parallel_size=1)
    model, model_cfg, _ = load(yaml_model, nemo)
    hf.save_pretrained(tmp_path / "both")
    save_nemo(tmp_path / "both", model, model_cfg, ps, is_main=True)
    assert (tmp_path / "both" / "model_weights.ckpt").is_file() and (tmp_path / "both" / "config.json").is_file()
    assert isinstance(model_source(yaml_model, str(tmp_path / "both"), 64)[2], HFWeights)
    (tmp_path / "both" / "config.json").unlink()  # NeMo's files alone
    assert isinstance(model_source(yaml_model, str(tmp_path / "both"), 64)[2], NeMoWeights)
