"""HF -> Megatron -> HF weight conversion for tiny Llama (grouped-query attention, untied
head) and GPT-2 (tied, Conv1D) models built from configs; the Megatron model's logits equal
the HF model's on the converted weights (one process; TP=2 is checked by the torchrun worker)."""

import pytest
import torch

pytestmark = pytest.mark.usefixtures("megatron_cpu")


def tiny_hf(kind, seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if kind == "llama":
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                             tie_word_embeddings=False, rope_theta=10000.0)
        return LlamaForCausalLM(config).eval()
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=32)
    return GPT2LMHeadModel(config).eval()


def megatron_model(model_cfg):
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from rlkit_nemo.models.from_yaml import build_gpt

    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(0)
    return build_gpt(model_cfg, 64, cpu=True).eval()


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_hf_megatron_hf_round_trip_is_exact(kind):
    from rlkit_nemo.convert import hf_to_megatron, megatron_to_hf, megatron_model_config
    from rlkit_nemo.models.sharding import full_state_dict, load_full_state_dict

    hf = tiny_hf(kind)
    original = {k: v for k, v in hf.state_dict().items() if not k.endswith(".attn.bias")}
    full = hf_to_megatron(original, hf.config)
    model = megatron_model(megatron_model_config(hf.config))
    load_full_state_dict(model, full)  # every Megatron tensor is covered by the conversion
    back = megatron_to_hf(full_state_dict(model), hf.config)
    assert set(back) == set(original)
    assert all(torch.equal(back[k], original[k]) for k in original)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_megatron_logits_equal_the_hf_models(kind):
    from rlkit_nemo.convert import hf_to_megatron, megatron_model_config
    from rlkit_nemo.models.gpt import causal_padding_mask
    from rlkit_nemo.models.sharding import load_full_state_dict

    hf = tiny_hf(kind)
    model = megatron_model(megatron_model_config(hf.config))
    load_full_state_dict(model, hf_to_megatron(hf.state_dict(), hf.config))
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    positions = torch.arange(12).repeat(2, 1)
    with torch.no_grad():
        expected = hf(input_ids=ids).logits
        got = model(ids, positions, causal_padding_mask(mask))
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < 1e-4


def test_unknown_hf_model_type_is_a_config_error():
    from transformers import BertConfig

    from rlkit_core.errors import ConfigError
    from rlkit_nemo.convert import megatron_model_config

    with pytest.raises(ConfigError, match="'bert' has no Megatron conversion; rlkit-nemo converts llama and gpt2"):
        megatron_model_config(BertConfig())


# --- Llama 3 rope, vocabulary padding, lazy reads ---------------------------------------------

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
                  "original_max_position_embeddings": 256}


def tiny_llama3(rope_scaling=LLAMA3_SCALING, theta=500000.0, seed=0):
    """A Llama 3-style model: grouped-query attention, rope_theta 500000 and llama3 rope scaling
    whose three bands all occur at head_dim 16 (kept, blended, divided), weights large enough
    that the rotation shows in the logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False, rope_theta=theta,
                         rope_scaling=rope_scaling, initializer_range=0.3)
    return LlamaForCausalLM(config).eval()


def megatron_logits(model, ids):
    from rlkit_nemo.models.gpt import causal_padding_mask

    with torch.no_grad():
        return model(ids, torch.arange(ids.shape[1]).repeat(ids.shape[0], 1), causal_padding_mask(torch.ones_like(ids)))


def test_llama3_rope_theta_and_scaling_reach_megatron():
    from rlkit_nemo.convert import megatron_model_config

    model = megatron_model_config(tiny_llama3().config)
    assert model["rotary_base"] == 500000.0 and model["rope_scaling"] == LLAMA3_SCALING
    assert model["kv_channels"] == 16 and model["num_query_groups"] == 2


def test_llama3_round_trip_is_exact_and_logits_equal_hfs():
    from rlkit_nemo.convert import hf_to_megatron, megatron_model_config, megatron_to_hf
    from rlkit_nemo.models.sharding import full_state_dict, load_full_state_dict
    from rlkit_nemo.rope import inverse_frequencies

    hf = tiny_llama3()
    original = hf.state_dict()
    model = megatron_model(megatron_model_config(hf.config))
    load_full_state_dict(model, hf_to_megatron(original, hf.config))
    back = megatron_to_hf(full_state_dict(model), hf.config)
    assert set(back) == set(original) and all(torch.equal(back[k], original[k]) for k in original)
    # the inverse frequencies are HF's own, band for band
    assert torch.equal(model.rotary_pos_emb.inv_freq, hf.model.rotary_emb.inv_freq)
    ids = torch.randint(0, 64, (2, 200), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(input_ids=ids).logits
    got = megatron_logits(model, ids)
    assert (got - expected).abs().max() < 1e-4
    # a wrong rope would fail: megatron-core's own llama3 scaling (fixed 1/4/8192) or none at all
    for wrong in (inverse_frequencies(16, 500000.0), inverse_frequencies(16, 500000.0, dict(LLAMA3_SCALING, high_freq_factor=4.0))):
        model.rotary_pos_emb.inv_freq = wrong
        model.rotary_pos_emb.forward.cache_clear()
        assert (megatron_logits(model, ids) - expected).abs().max() > 1e-2


def test_linear_rope_scaling_and_unknown_types():
    from rlkit_core.errors import ConfigError
    from rlkit_nemo.convert import hf_to_megatron, megatron_model_config

    hf = tiny_llama3(rope_scaling={"rope_type": "linear", "factor": 4.0}, theta=10000.0)
    model = megatron_model(megatron_model_config(hf.config))
    from rlkit_nemo.models.sharding import load_full_state_dict

    load_full_state_dict(model, hf_to_megatron(hf.state_dict(), hf.config))
    ids = torch.randint(0, 64, (1, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (megatron_logits(model, ids) - hf(input_ids=ids).logits).abs().max() < 1e-4
    hf.config.rope_scaling = {"rope_type": "yarn", "factor": 4.0}
    with pytest.raises(ConfigError, match="rope_scaling type 'yarn' has no Megatron conversion"):
        megatron_model_config(hf.config)


def test_gpt2_vocabulary_is_padded_on_load_masked_and_stripped_on_export():
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlkit_nemo.convert import HFWeights, DictReader, megatron_model_config, megatron_to_hf
    from rlkit_nemo.sliced_loading import load_weights, mask_padded_vocab
    from rlkit_nemo.model_keys import padded_vocab_size
    from rlkit_nemo.models.from_yaml import build_gpt
    from rlkit_nemo.models.sharding import full_state_dict

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=61, n_embd=32, n_layer=2, n_head=4, n_positions=32)).eval()
    original = {k: v for k, v in hf.state_dict().items() if not k.endswith(".attn.bias")}
    model_cfg = dict(megatron_model_config(hf.config), make_vocab_size_divisible_by=16)
    padded = padded_vocab_size(61, model_cfg, tp=1)
    assert padded == 64
    megatron_model(model_cfg)  # parallel state at TP=1
    model = build_gpt(model_cfg, padded, cpu=True).eval()
    load_weights(model, HFWeights(DictReader(original), hf.config), vocab_size=61)
    assert torch.equal(model.embedding.word_embeddings.weight[61:], torch.zeros(3, 32))
    mask_padded_vocab(model, 61)
    ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    got = megatron_logits(model, ids)
    with torch.no_grad():
        expected = hf(input_ids=ids).logits
    assert got.shape[-1] == 64 and (got[..., :61] - expected).abs().max() < 1e-4
    assert (got[..., 61:] == torch.finfo(got.dtype).min).all()  # never sampled, no probability
    back = megatron_to_hf(full_state_dict(model), hf.config)
    assert set(back) == set(original) and all(torch.equal(back[k], original[k]) for k in original)


@pytest.mark.parametrize("kind", ["llama3", "gpt2"])
def test_safetensors_folder_is_read_lazily_and_converts_like_the_state_dict(kind, tmp_path):
    from rlkit_nemo.convert import hf_source, hf_to_megatron

    hf = tiny_llama3() if kind == "llama3" else tiny_hf("gpt2")
    hf.save_pretrained(tmp_path)
    lazy = hf_source(str(tmp_path), hf.config)
    full = hf_to_megatron(hf.state_dict(), hf.config)
    assert set(lazy.names()) == set(full)
    for name, tensor in full.items():
        assert lazy.shape(name) == tuple(tensor.shape), name
        assert torch.equal(lazy.full(name), tensor), name
        if tensor.dim() == 2:  # a rank's half of the rows or columns, as TP=2 asks for them
            rows, cols = tensor.shape
            assert torch.equal(lazy.rows(name, rows // 2, rows), tensor[rows // 2:]), name
            assert torch.equal(lazy.cols(name, 0, cols // 2), tensor[:, : cols // 2]), name
