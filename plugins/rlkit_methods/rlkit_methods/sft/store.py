"""SFT data: samples tokenized with prompt tokens masked out of the loss (label -100).

The collate function pads on the tokenizer's ``padding_side`` and always returns
``position_ids`` that follow the real tokens, so left and right padding train alike.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from rlkit_methods.common.validate import check_samples
from rlkit_methods.data.dialogue import DialogMessage, tokenize_dialogue
from rlkit_methods.data.padding import pad, position_ids_from_mask
from rlkit_methods.data.trlx_loader import TrlxLoader

IGNORE_INDEX = -100  # CrossEntropyLoss's ignore index


class SFTStore(TrlxLoader, Dataset):
    """trlX's ``DialogStore``: ``input_ids``, ``attention_mask`` and ``labels`` per sample."""

    def __init__(self, dialogs: Sequence[Sequence[DialogMessage]], tokenizer: Any):
        super().__init__()
        self.tokenizer = tokenizer
        self.history = []
        for d in dialogs:
            input_ids = torch.tensor([t for m in d for t in m.tokens], dtype=torch.long)
            labels = torch.tensor([t if m.is_output else IGNORE_INDEX for m in d for t in m.tokens], dtype=torch.long)
            self.history.append(
                {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
            )

    def __getitem__(self, ix: int) -> dict[str, torch.Tensor]:
        return self.history[ix]

    def __len__(self) -> int:
        return len(self.history)

    def collate(self, elems: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        side = getattr(self.tokenizer, "padding_side", "right")
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id or 0
        attention_mask = pad([e["attention_mask"] for e in elems], 0, side)
        return {
            "input_ids": pad([e["input_ids"] for e in elems], pad_id, side),
            "attention_mask": attention_mask,
            "position_ids": position_ids_from_mask(attention_mask),
            "labels": pad([e["labels"] for e in elems], IGNORE_INDEX, side),
        }



def make_sft_experience(samples: Sequence[Any], tokenizer: Any, max_length: int = 2048) -> SFTStore:
    """Samples (strings, ``[prompt, output, ...]`` lists, or conversations ``{"messages": [...]}``
    rendered with the chat template, :mod:`rlkit_methods.data.chat`) -> :class:`SFTStore`. A
    string is an output after a BOS prompt, so the whole text (and EOS) is learned; in a
    conversation, the assistant turns are."""
    from rlkit_methods.data.chat import is_conversation, messages_to_dialogue

    if samples is not None and not isinstance(samples, (str, bytes)):
        converted = []
        for i, sample in enumerate(samples):
            try:
                converted.append(messages_to_dialogue(sample, tokenizer) if is_conversation(sample) else sample)
            except ValueError as exc:
                raise ValueError(f"samples[{i}]: {exc}") from None
        samples = converted
    samples = check_samples(samples)
    dialogs = []
    for i, sample in enumerate(samples):
        try:
            dialogs.append(tokenize_dialogue(sample, tokenizer, max_length))
        except ValueError as exc:
            raise ValueError(f"samples[{i}]: {exc}") from None
    return SFTStore(dialogs, tokenizer)
