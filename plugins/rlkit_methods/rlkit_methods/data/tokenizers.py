"""Tokenizer loading with trlX's options, and a pad token when the model has none."""

from __future__ import annotations

from typing import Any, Callable

from rlkit_core.errors import RlkitError


def load_tokenizer(config: Any, resolve: Callable[[Any], Any] = lambda p: p):
    """``tokenizer.tokenizer_path`` may be a folder, a hub id, a model source name, ``byt5``
    (a byte-level tokenizer that needs no files) or (from Python) a tokenizer object. Padding and truncation sides come from the config; a
    tokenizer without a pad token pads with its EOS token."""
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    path = config.tokenizer_path
    if isinstance(path, PreTrainedTokenizerBase):
        tokenizer = path
    elif isinstance(path, str) and path.lower() == "byt5":
        from transformers import ByT5Tokenizer

        tokenizer = ByT5Tokenizer(**config.tokenizer_extra_configs)  # one token per byte, no files needed
    else:
        path = resolve(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), **config.tokenizer_extra_configs)
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
