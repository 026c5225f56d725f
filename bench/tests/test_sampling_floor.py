"""bench/sampling_floor.py: the floor multiplies through every linear layer of the model, the
LM head (tied or not) exactly once and last, and refuses models whose layers it cannot see."""

from __future__ import annotations

import pytest
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from sampling_floor import linear_weights, products_seconds


def tiny_llama(tied: bool) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("tied", [True, False])
def test_every_linear_layer_once_and_the_head_last(tied):
    model = tiny_llama(tied)
    weights = linear_weights(model)
    # 2 layers x (q, k, v, o, gate, up, down) + the head
    assert len(weights) == 2 * 7 + 1
    assert weights[-1] is model.get_output_embeddings().weight
    assert sum(w is model.get_output_embeddings().weight for w in weights) == 1
    assert (weights[-1] is model.get_input_embeddings().weight) == tied
    assert products_seconds(weights, rows=3, lm_head_rows=1, repeats=1) >= 0.0


def test_a_model_with_conv1d_layers_is_refused_in_one_line():
    model = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=32, n_layer=1, n_head=2, n_positions=16))
    with pytest.raises(SystemExit, match="Conv1D layers .* nn.Linear"):
        linear_weights(model)
