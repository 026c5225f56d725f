"""Decoder layout found by structure, and running a model in pieces reproduces it exactly."""

from __future__ import annotations

import pytest
import torch
import transformers
from tiny_models import CONFIGS, VOCAB, build, left_padded
from torch import nn

from rlkit_accelerate.models import find_decoder_blocks, find_layout, position_ids_from_mask, run_blocks, run_post, run_trunk
from rlkit_core.errors import RlkitError

EXPECTED = {
    "gpt2": ("transformer.h", ["transformer.ln_f"]),
    "llama": ("model.layers", ["model.norm"]),
    "qwen2": ("model.layers", ["model.norm"]),
    "gpt_neox": ("gpt_neox.layers", ["gpt_neox.final_layer_norm"]),
    "opt": ("model.decoder.layers", ["model.decoder.final_layer_norm"]),
    "gemma": ("model.layers", ["model.norm"]),
}


def test_position_ids_follow_real_tokens():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_layout_found_by_structure(arch):
    model = build(arch, num_layers=3)
    layout = find_layout(model)
    blocks_name, post_names = EXPECTED[arch]
    assert (layout.blocks_name, layout.post_names, layout.num_blocks) == (blocks_name, post_names, 3)
    assert layout.lm_head is model.get_output_embeddings()


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_split_at_every_block_reproduces_logits(arch):
    model = build(arch, num_layers=3).eval()
    input_ids, attention_mask = left_padded()
    position_ids = position_ids_from_mask(attention_mask)
    expected = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    layout = find_layout(model)
    for index in range(layout.num_blocks + 1):
        trunk = run_trunk(model, layout, index, input_ids, attention_mask, position_ids)
        assert trunk.index == index and trunk.hidden.shape == (3, 9, 32)
        hidden = run_blocks(layout.blocks[index:], trunk.hidden, trunk)
        logits = layout.lm_head(run_post(layout.post, hidden))
        assert torch.equal(logits, expected), (arch, index)


def test_opt_projection_is_a_post_block_module():
    config = CONFIGS["opt"](2)
    config.word_embed_proj_dim, config.do_layer_norm_before = 16, False  # project_out, no final norm
    torch.manual_seed(0)
    layout = find_layout(transformers.AutoModelForCausalLM.from_config(config))
    assert layout.post_names == ["model.decoder.project_out"]
    assert layout.hidden_size == 16


def test_blocks_are_the_largest_uniform_list():
    model = build("gpt2", num_layers=2)
    model.extra = nn.ModuleList(nn.Linear(2, 2) for _ in range(8))  # longer, but tiny
    model.mixed = nn.ModuleList([nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)])  # not one class
    name, blocks = find_decoder_blocks(model)
    assert name == "transformer.h" and blocks is model.transformer.h


def test_logit_softcapping_is_refused():
    config = transformers.Gemma2Config(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=1,
        head_dim=8, vocab_size=VOCAB, final_logit_softcapping=5.0,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(RlkitError, match="soft-capping"):
        find_layout(model)
