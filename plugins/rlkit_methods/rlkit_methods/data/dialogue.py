"""trlX's ``tokenize_dialogue``: samples as strings or ``[prompt, output, prompt, output, ...]``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass
class DialogMessage:
    """One turn: its token ids and whether the model produced it (an output)."""

    is_output: bool
    tokens: tuple[int, ...]


def tokenize_dialogue(dialogue: str | Sequence[str], tokenizer: Any, max_length: int = 2048) -> list[DialogMessage]:
    """Tokenize one sample into alternating prompt/output messages, as trlX does.

    * a string is an output with the BOS token (or EOS if there is none) as its prompt;
    * EOS is appended to the last turn unless it already ends with it;
    * the whole dialogue is truncated to ``max_length`` tokens on the tokenizer's
      ``truncation_side`` (with a warning); empty turns are dropped;
    * if the first remaining turn is an output, a BOS prompt is put in front.
    """
    if isinstance(dialogue, str):
        if not dialogue:
            raise ValueError("sample is empty; give some text")
        prompt = tokenizer.bos_token or tokenizer.eos_token or ""
        dialogue = [prompt, dialogue]
    else:
        dialogue = list(dialogue)
        if not dialogue or all(not turn for turn in dialogue):
            raise ValueError("sample is empty; give some text")
        if len(dialogue) % 2:
            raise ValueError(f"a dialogue needs an even number of turns [prompt, output, ...], got {len(dialogue)}")
    eos = tokenizer.eos_token
    given = list(dialogue)
    if eos and not dialogue[-1].endswith(eos):
        dialogue[-1] = dialogue[-1] + eos

    messages = [
        DialogMessage(is_output=i % 2 == 1, tokens=tuple(tokenizer(turn, add_special_tokens=False).input_ids))
        for i, turn in enumerate(dialogue)
    ]
    for i, (turn, message) in enumerate(zip(given, messages)):
        # text the tokenizer knows none of: the turn trains nothing (an output, only its EOS)
        if turn.strip() and len(message.tokens) <= int(dialogue[i] != turn) and not tokenizer(turn, add_special_tokens=False).input_ids:
            raise ValueError(f"{turn[:30]!r} tokenizes to no tokens: the tokenizer knows none of its characters; "
                             f"check the samples against the tokenizer (tokenizer.tokenizer_path)")
    total = sum(len(m.tokens) for m in messages)
    left = getattr(tokenizer, "truncation_side", "right") == "left"
    if total > max_length:
        warnings.warn(
            f"sample of {total} tokens truncated to {max_length} (train.seq_length) on the {'left' if left else 'right'}",
            stacklevel=3,
        )
        if left:  # flip to truncate from the left
            messages = [DialogMessage(m.is_output, m.tokens[::-1]) for m in messages[::-1]]
        budget, kept = max_length, []
        for m in messages:
            kept.append(DialogMessage(m.is_output, m.tokens[: max(budget, 0)]))
            budget -= len(m.tokens)
        messages = [DialogMessage(m.is_output, m.tokens[::-1]) for m in kept[::-1]] if left else kept
    messages = [m for m in messages if m.tokens]
    if not messages:
        raise ValueError("sample has no tokens after tokenization; give some text")
    if messages[0].is_output:
        bos_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if sum(len(m.tokens) for m in messages) >= max_length:  # make room for the BOS prompt
            if left:
                messages[0] = DialogMessage(True, messages[0].tokens[1:])
            else:
                messages[-1] = DialogMessage(True, messages[-1].tokens[:-1])
            messages = [m for m in messages if m.tokens]
        messages.insert(0, DialogMessage(False, (bos_id,)))
    if not any(m.is_output for m in messages):
        raise ValueError("sample has no output tokens left after truncation; raise train.seq_length")
    return messages
