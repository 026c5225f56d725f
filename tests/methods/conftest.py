"""Shared fixtures for rlkit-methods: tokenizers built without files, a host with our plugin."""

from __future__ import annotations

import pytest

CORPUS = [
    "the movie was great and the acting was wonderful",
    "a terrible film with awful dialogue",
    "hello world, this is a tiny corpus for a tiny tokenizer",
    "abcdefghijklmnopqrstuvwxyz | 0123456789",
] * 4


def _bpe_tokenizer(padding_side: str = "left", truncation_side: str = "right"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        padding_side=padding_side, truncation_side=truncation_side,
    )


@pytest.fixture(scope="session")
def make_tokenizer():
    """``make_tokenizer(padding_side="left", truncation_side="right")``: a byte-level BPE
    trained on the fly (BOS <s>, EOS </s>, PAD <pad>)."""
    cache = {}

    def make(padding_side: str = "left", truncation_side: str = "right"):
        key = (padding_side, truncation_side)
        if key not in cache:
            cache[key] = _bpe_tokenizer(padding_side, truncation_side)
        return cache[key]

    return make


@pytest.fixture
def tokenizer(make_tokenizer):
    return make_tokenizer()


@pytest.fixture(scope="session")
def char_tokenizer():
    """A tokenizer with one token per character (ByT5's): ids are predictable in worked examples."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer()


@pytest.fixture
def methods_host(rlkit_bare_host):
    """A fresh host holding only rlkit-methods, made the process-wide host for the test."""
    import rlkit_methods.plugin as plugin

    rlkit_bare_host.register(plugin, "rlkit_methods", source="test")
    return rlkit_bare_host
