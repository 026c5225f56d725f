"""HF configs -> Megatron model keys under the main venv's transformers 5, where rope_theta and
rope_scaling live in ``config.rope_parameters``; the rotary frequencies rlkit-nemo computes are
transformers' own (the NeMo venv, transformers 4, checks the same against the model's logits)."""

import pytest
import torch
from transformers import GPT2Config, LlamaConfig

from rlkit_core.errors import ConfigError
from rlkit_nemo.convert import hf_config_from_megatron, megatron_model_config
from rlkit_nemo.rope import inverse_frequencies, rope_settings

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
          "original_max_position_embeddings": 256}


def llama(**kwargs):
    return LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False, **kwargs)


def test_rope_theta_and_llama3_scaling_are_read_in_either_layout():
    config = llama(rope_theta=500000.0, rope_scaling=dict(LLAMA3))
    assert rope_settings(config) == (500000.0, LLAMA3)
    model = megatron_model_config(config)
    assert model["rotary_base"] == 500000.0 and model["rope_scaling"] == LLAMA3
    assert rope_settings(llama()) == (10000.0, None)
    assert rope_settings(llama(rope_parameters={"rope_type": "default", "rope_theta": 123.0})) == (123.0, None)


def test_inverse_frequencies_are_transformers_own():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = llama(rope_theta=500000.0, rope_scaling=dict(LLAMA3))
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    assert torch.equal(inverse_frequencies(16, 500000.0, rope_settings(config)[1]), theirs)
    linear = llama(rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0})
    theirs, _ = ROPE_INIT_FUNCTIONS["linear"](linear, "cpu")
    assert torch.equal(inverse_frequencies(16, 10000.0, rope_settings(linear)[1]), theirs)


def test_unsupported_rope_and_biases_are_one_line():
    with pytest.raises(ConfigError, match="rope_scaling type 'yarn' has no Megatron conversion"):
        rope_settings(llama(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}))
    with pytest.raises(ConfigError, match="attention_bias or mlp_bias has no Megatron conversion"):
        megatron_model_config(llama(attention_bias=True))


@pytest.mark.parametrize("config", [llama(rope_theta=500000.0, rope_scaling=dict(LLAMA3)),
                                    GPT2Config(vocab_size=61, n_embd=32, n_layer=2, n_head=4, n_positions=32)])
def test_a_megatron_model_section_gives_back_its_hf_config(config):
    model = megatron_model_config(config)
    again = hf_config_from_megatron(model, config.vocab_size)
    assert again.model_type == config.model_type and megatron_model_config(again) == model
