"""Tiny causal LMs built from configs (no downloads), one per architecture family.

A plain module (not conftest.py) so tests import it by a name no other test folder uses."""

from __future__ import annotations

import torch
import transformers

VOCAB = 96
TOKENS = dict(bos_token_id=0, eos_token_id=1, pad_token_id=2)
ROPE = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, max_position_embeddings=64)

CONFIGS = {
    "gpt2": lambda n: transformers.GPT2Config(n_layer=n, n_embd=32, n_head=4, n_positions=64, vocab_size=VOCAB, **TOKENS),
    "llama": lambda n: transformers.LlamaConfig(num_hidden_layers=n, num_key_value_heads=2, vocab_size=VOCAB, **ROPE, **TOKENS),
    "qwen2": lambda n: transformers.Qwen2Config(num_hidden_layers=n, num_key_value_heads=2, vocab_size=VOCAB, **ROPE, **TOKENS),
    "gpt_neox": lambda n: transformers.GPTNeoXConfig(num_hidden_layers=n, vocab_size=VOCAB, **ROPE, **TOKENS),
    "opt": lambda n: transformers.OPTConfig(
        num_hidden_layers=n, hidden_size=32, ffn_dim=64, num_attention_heads=4, max_position_embeddings=64,
        word_embed_proj_dim=32, vocab_size=VOCAB, **TOKENS,
    ),
    "gemma": lambda n: transformers.GemmaConfig(
        num_hidden_layers=n, num_key_value_heads=1, head_dim=8, vocab_size=VOCAB, **ROPE, **TOKENS,
    ),
}


def build(arch: str, num_layers: int = 4, seed: int = 0) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(CONFIGS[arch](num_layers))


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """A batch [3, 9] of random tokens with 0, 3 and 5 left pads, and its attention mask."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, VOCAB, (3, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row, pads in enumerate([0, 3, 5]):
        attention_mask[row, :pads] = 0
        input_ids[row, :pads] = TOKENS["pad_token_id"]
    return input_ids, attention_mask
