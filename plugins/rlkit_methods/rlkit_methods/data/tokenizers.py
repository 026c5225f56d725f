"""Tokenizer loading with trlX's options, and a pad token when the model has none."""

from __future__ import annotations

from typing import Any, Callable

from rlkit_core.errors import RlkitError


def load_tokenizer(config: Any, resolve: Callable[[Any], Any] = lambda p: p, *, trust_remote_code: bool = False):
    """``tokenizer.tokenizer_path`` may be a folder, a hub id, a model source name, ``byt5``
    (a byte-level tokenizer that needs no files), ``randomwalks`` (trlX's 23-token randomwalks
    vocabulary, built in code: see ``randomwalks_tokenizer``) or (from Python) a tokenizer
    object. Padding and truncation sides come from the config; a tokenizer without a pad token
    pads with its EOS token."""
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    path = config.tokenizer_path
    if isinstance(path, PreTrainedTokenizerBase):
        tokenizer = path
    elif isinstance(path, str) and path.lower() == "byt5":
        from transformers import ByT5Tokenizer

        tokenizer = ByT5Tokenizer(**config.tokenizer_extra_configs)  # one token per byte, no files needed
    elif isinstance(path, str) and path.lower() == "randomwalks":
        tokenizer = randomwalks_tokenizer(**config.tokenizer_extra_configs)
    else:
        path = resolve(path)
        try:
            # always rlkit's answer (``model.trust_remote_code``): unset, transformers asks on stdin
            options = {**config.tokenizer_extra_configs, "trust_remote_code": trust_remote_code}
            tokenizer = AutoTokenizer.from_pretrained(str(path), **options)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RlkitError(f"tokenizer.tokenizer_path {str(path)!r}: cannot load a tokenizer ({first})") from exc
    tokenizer.padding_side = config.padding_side
    tokenizer.truncation_side = config.truncation_side
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise RlkitError("tokenizer: it has neither a pad token nor an EOS token; set tokenizer.tokenizer_extra_configs.pad_token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


RANDOMWALKS_EOS = "<|endoftext|>"
RANDOMWALKS_PAD = "<|padding|>"


def randomwalks_vocab(n_nodes: int = 21) -> list[str]:
    """The randomwalks vocabulary in id order: one letter per node (``a`` = 0, ...), then EOS
    (also BOS) and pad. 21 nodes give trlX's ``vocab_size=23``."""
    if not 2 <= n_nodes <= 26:
        raise RlkitError(f"tokenizer.tokenizer_extra_configs.n_nodes: must be in [2, 26] (one letter per node), got {n_nodes}")
    return [chr(ord("a") + i) for i in range(n_nodes)] + [RANDOMWALKS_EOS, RANDOMWALKS_PAD]


def randomwalks_tokenizer(n_nodes: int = 21):
    """A fast tokenizer with one token per node letter (trlX's randomwalks task loads a
    23-token tokenizer from the hub; this one is built in code, no files). Characters that are
    not node letters have no token and are dropped, as the 23-token vocabulary has no room
    for an unknown token; the metric scores such walks by their letters alone."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = randomwalks_vocab(n_nodes)
    model = Tokenizer(models.BPE({token: i for i, token in enumerate(vocab)}, [], dropout=None))  # no merges: one token per letter
    model.decoder = decoders.Fuse()  # join tokens without spaces
    return PreTrainedTokenizerFast(tokenizer_object=model, bos_token=RANDOMWALKS_EOS, eos_token=RANDOMWALKS_EOS,
                                   pad_token=RANDOMWALKS_PAD)
