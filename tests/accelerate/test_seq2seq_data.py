"""Offline [prompt, output] data for encoder-decoder models: the ILQL indexing over the decoder
sequence, SFT labels (output + EOS), padding, and bad samples."""

import pytest
import torch
from transformers import ByT5Tokenizer

from rlkit_methods.data.seq2seq import make_seq2seq_ilql_experience, make_seq2seq_sft_experience

TOKENIZER = ByT5Tokenizer()  # one token per byte (+3), EOS 1, pad 0


def ids(text):
    return [ord(c) + 3 for c in text]


def test_ilql_store_indexes_the_decoder_sequence():
    store = make_seq2seq_ilql_experience([["b", "cda"], ["e", "a"]], [1.0, 0.0], TOKENIZER, decoder_start_token_id=0)
    first = store[0]
    assert first["input_ids"].tolist() == ids("b") + [1]  # the prompt keeps the EOS the tokenizer appends
    assert first["decoder_input_ids"].tolist() == [0, *ids("cda"), 1]  # [start, a_1 .. a_n], a_n = EOS
    assert first["actions_ixs"].tolist() == [0, 1, 2, 3] and first["states_ixs"].tolist() == [0, 1, 2, 3, 4]
    assert first["dones"].tolist() == [1, 1, 1, 1, 0]
    rewards = first["rewards"].tolist()
    assert rewards[:-1] == [0, 0, 0] and rewards[-1] > 0 > store[1]["rewards"][-1]  # normalised, on the last action
    batch = store.collate([store[0], store[1]])
    assert batch.decoder_input_ids.shape == (2, 5) and batch.decoder_input_ids[1].tolist() == [0, *ids("a"), 1, 0, 0]
    assert batch.decoder_attention_mask[1].tolist() == [1, 1, 1, 0, 0] and batch.dones[1].tolist() == [1, 1, 0, 0, 0]
    assert batch.rewards.shape == batch.actions_ixs.shape == (2, 4)


def test_sft_labels_are_the_output_and_one_eos():
    store = make_seq2seq_sft_experience([["b", "cd"], ["e", "f</s>"], "gh"], TOKENIZER)
    assert store[0]["labels"].tolist() == ids("cd") + [1]
    assert store[1]["labels"].tolist() == ids("f") + [1]  # an output that ends with EOS keeps one
    assert store[2]["input_ids"].tolist() == [1]  # a plain string is an output with an empty prompt
    batch = store.collate([store[0], store[2]])
    assert batch["labels"].tolist() == [ids("cd") + [1], ids("gh") + [1]]
    assert batch["input_ids"].tolist() == [ids("b") + [1], [1, 0]] and batch["attention_mask"].tolist() == [[1, 1], [1, 0]]


def test_outputs_are_cut_to_max_length():
    store = make_seq2seq_sft_experience([["b", "cdefgh"]], TOKENIZER, max_length=4)
    assert store[0]["labels"].tolist() == ids("cdef")


@pytest.mark.parametrize("samples, message", [
    ([["b", "c", "d", "e"]], r"samples\[0\]: a seq2seq sample is \[prompt, output\]; got 4 parts"),  # no multi-turn
    ([["b", "c"], ["d", ""]], r"samples\[1\]: sample has an empty output"),
])
def test_bad_samples_name_the_sample(samples, message):
    with pytest.raises(ValueError, match=message):
        make_seq2seq_sft_experience(samples, TOKENIZER)
