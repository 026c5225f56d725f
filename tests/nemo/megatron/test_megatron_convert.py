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

    from rlkit_nemo.models.build import build_gpt

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
