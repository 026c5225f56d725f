"""bench/prefs_floor.py: the bare step's batch is the bench's reward rows (prompt + completion,
no EOS), chosen rows before rejected, right-padded, with each pair's margin; one bare step
trains every weight."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from prefs_floor import bare_step, pair_batch


class CharTokenizer:
    pad_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        assert not add_special_tokens  # the bench's rows carry no special tokens
        return SimpleNamespace(input_ids=[ord(c) - 96 for c in text])


PAIRS = [{"prompt": "ab", "chosen": "c", "rejected": "dd", "margin": 0.5},
         {"prompt": "e", "chosen": "fgh", "rejected": "i", "margin": 0.0}]


def test_chosen_rows_then_rejected_rows_right_padded_with_the_margins():
    batch = pair_batch(PAIRS, CharTokenizer())
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0], [5, 6, 7, 8], [1, 2, 4, 4], [5, 9, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["margin"].tolist() == [0.5, 0.0]


def test_a_bare_step_moves_every_weight():
    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, num_labels=1, pad_token_id=0)
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert bare_step(model, optimizer, pair_batch(PAIRS, CharTokenizer())) >= 0.0
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert len(moved) == len(before), set(before) - set(moved)
