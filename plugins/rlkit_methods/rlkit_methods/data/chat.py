"""Conversational samples (``{"messages": [{"role": ..., "content": ...}, ...]}``, TRL's format)
as trlX's ``[prompt, output, ...]`` dialogues: rendered with the tokenizer's chat template,
each assistant turn an output (the loss is on those), everything between them a prompt."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def is_conversation(sample: Any) -> bool:
    """``{"messages": [...]}``, or a bare list of ``{"role", "content"}`` turns."""
    if isinstance(sample, Mapping):
        return "messages" in sample
    return (isinstance(sample, Sequence) and not isinstance(sample, str) and len(sample) > 0
            and all(isinstance(turn, Mapping) and "role" in turn for turn in sample))


def messages_to_dialogue(sample: Any, tokenizer: Any) -> list[str]:
    """The alternating prompt/output texts of one conversation (the template's text, piece by
    piece: the prompt before an assistant turn ends with the template's generation prompt)."""
    messages = list(sample["messages"] if isinstance(sample, Mapping) else sample)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("a messages sample needs a tokenizer with a chat template; set tokenizer.chat_template "
                         "(a Jinja string) or use a tokenizer that has one")
    for turn in messages:
        if not isinstance(turn, Mapping) or not {"role", "content"} <= set(turn):
            raise ValueError(f"every message needs 'role' and 'content', got {turn!r}")
    if not any(turn["role"] == "assistant" for turn in messages):
        raise ValueError("no assistant message: nothing to learn; give at least one {'role': 'assistant', ...}")

    def render(turns: Sequence[Mapping[str, Any]], generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(list(turns), tokenize=False, add_generation_prompt=generation_prompt)

    dialogue, done = [], ""
    for k, turn in enumerate(messages):
        if turn["role"] != "assistant":
            continue
        head = render(messages[:k], True) if k else ""  # an opening assistant turn: a BOS prompt
        full = render(messages[: k + 1], False)
        if not head.startswith(done) or not full.startswith(head):
            raise ValueError("the chat template does not render a conversation as the text of its first turns "
                             "followed by the next; rlkit cannot tell which tokens are the assistant's")
        output = full[len(head):]
        # the turn's end marker is learned; whitespace after it belongs to the next prompt
        rest = output[len(output.rstrip()):]
        dialogue += [head[len(done):], output[: len(output) - len(rest)]]
        done = full[: len(full) - len(rest)]
    return dialogue
