"""Offline data for encoder-decoder models: ``[prompt, output]`` samples where the prompt is
the encoder's input and the output the decoder's sequence.

Tokenization follows the prompt pipeline's seq2seq setting (``add_special_tokens=True``, so a
T5 tokenizer appends EOS to the prompt, as at generation time); the output gets EOS unless it
ends with it. A plain string is an output with an empty prompt. Multi-turn dialogues have no
seq2seq meaning and are refused.

ILQL indexing over the decoder sequence ``[start, a_1, ..., a_n]`` (``a_n`` = EOS): the state
at position ``t`` takes action ``a_{t+1}``, so ``actions_ixs = 0..n-1``, ``states_ixs = 0..n``
(the last one terminal), ``dones = 1..1, 0`` and the normalised reward sits on the last action.
``ILQLConfig.loss`` reads the actions from ``decoder_input_ids[:, 1:]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from rlkit_methods.common.validate import check_rewards, check_samples
from rlkit_methods.data.padding import pad
from rlkit_methods.ilql.store import normalize_rewards
from rlkit_methods.sft.store import IGNORE_INDEX


def encode_pair(sample: Any, tokenizer: Any, max_length: int) -> tuple[list[int], list[int]]:
    """(prompt ids, output ids + EOS), each cut to ``max_length`` tokens (the output keeps EOS
    last only when it fits; a cut output is a truncated one, as for causal samples)."""
    if isinstance(sample, str):
        prompt, output = "", sample
    elif len(sample) == 2:
        prompt, output = sample
    else:
        raise ValueError(f"a seq2seq sample is [prompt, output]; got {len(sample)} parts")
    if not output:
        raise ValueError("sample has an empty output; ILQL and SFT learn from the output")
    prompt_ids = tokenizer(prompt).input_ids[:max_length]
    output_ids = tokenizer(output, add_special_tokens=False).input_ids
    eos = tokenizer.eos_token_id
    if eos is not None and (not output_ids or output_ids[-1] != eos):
        output_ids.append(eos)
    return prompt_ids, output_ids[:max_length]


def _encode_all(samples: Sequence[Any], tokenizer: Any, max_length: int) -> list[tuple[list[int], list[int]]]:
    pairs = []
    for i, sample in enumerate(check_samples(samples)):
        try:
            pairs.append(encode_pair(sample, tokenizer, max_length))
        except ValueError as exc:
            raise ValueError(f"samples[{i}]: {exc}") from None
    return pairs


@dataclass
class Seq2SeqILQLBatch:
    input_ids: torch.Tensor  # (B, S) encoder input, right-padded
    attention_mask: torch.Tensor  # (B, S)
    decoder_input_ids: torch.Tensor  # (B, A + 1) [start, a_1 .. a_n], right-padded
    decoder_attention_mask: torch.Tensor  # (B, A + 1)
    rewards: torch.Tensor  # (B, A)
    states_ixs: torch.Tensor  # (B, A + 1)
    actions_ixs: torch.Tensor  # (B, A)
    dones: torch.Tensor  # (B, A + 1), 0 on padding


class Seq2SeqILQLStore(Dataset):
    """One dict per sample; ``collate`` pads them into a :class:`Seq2SeqILQLBatch`."""

    def __init__(self, items: list[dict[str, torch.Tensor]], pad_token_id: int):
        self.items, self.pad_token_id = items, pad_token_id

    def __getitem__(self, ix: int) -> dict[str, torch.Tensor]:
        return self.items[ix]

    def __len__(self) -> int:
        return len(self.items)

    def collate(self, items: Sequence[dict[str, torch.Tensor]]) -> Seq2SeqILQLBatch:
        def padded(key, value):
            return pad([e[key] for e in items], value, "right")

        return Seq2SeqILQLBatch(
            input_ids=padded("input_ids", self.pad_token_id),
            attention_mask=padded("attention_mask", 0),
            decoder_input_ids=padded("decoder_input_ids", self.pad_token_id),
            decoder_attention_mask=padded("decoder_attention_mask", 0),
            rewards=padded("rewards", 0.0),
            states_ixs=padded("states_ixs", 0),
            actions_ixs=padded("actions_ixs", 0),
            dones=padded("dones", 0),
        )


def make_seq2seq_ilql_experience(
    samples: Sequence[Any], rewards: Sequence[float], tokenizer: Any, decoder_start_token_id: int, max_length: int = 2048
) -> Seq2SeqILQLStore:
    pairs = _encode_all(samples, tokenizer, max_length)
    returns = normalize_rewards(check_rewards(rewards, len(pairs)))
    items = []
    for (prompt_ids, output_ids), ret in zip(pairs, returns):
        n = len(output_ids)
        r = torch.zeros(n)
        r[-1] = ret  # the reward arrives with the last action
        decoder_input_ids = torch.tensor([decoder_start_token_id, *output_ids])
        items.append({
            "input_ids": torch.tensor(prompt_ids), "attention_mask": torch.ones(len(prompt_ids), dtype=torch.long),
            "decoder_input_ids": decoder_input_ids, "decoder_attention_mask": torch.ones(n + 1, dtype=torch.long),
            "rewards": r, "actions_ixs": torch.arange(n), "states_ixs": torch.arange(n + 1),
            "dones": torch.tensor([1] * n + [0], dtype=torch.long),
        })
    return Seq2SeqILQLStore(items, tokenizer.pad_token_id)


class Seq2SeqSFTStore(Dataset):
    """Encoder ``input_ids`` (prompt) and decoder ``labels`` (output + EOS) per sample."""

    def __init__(self, pairs: list[tuple[list[int], list[int]]], pad_token_id: int):
        self.items = [{"input_ids": torch.tensor(p), "labels": torch.tensor(o)} for p, o in pairs]
        self.pad_token_id = pad_token_id

    def __getitem__(self, ix: int) -> dict[str, torch.Tensor]:
        return self.items[ix]

    def __len__(self) -> int:
        return len(self.items)

    def collate(self, items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {
            "input_ids": pad([e["input_ids"] for e in items], self.pad_token_id, "right"),
            "attention_mask": pad([torch.ones_like(e["input_ids"]) for e in items], 0, "right"),
            "labels": pad([e["labels"] for e in items], IGNORE_INDEX, "right"),
        }


def make_seq2seq_sft_experience(samples: Sequence[Any], tokenizer: Any, max_length: int = 2048) -> Seq2SeqSFTStore:
    return Seq2SeqSFTStore(_encode_all(samples, tokenizer, max_length), tokenizer.pad_token_id)
