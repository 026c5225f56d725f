"""A prompt and a completion (text or chat messages) as token ids, for the preference and
logged-data stores. Torch-free.

Chat messages are rendered with the tokenizer's chat template: the prompt with the
assistant's header (``add_generation_prompt``), the completion as what the whole conversation
adds after it. A plain-text completion ends with EOS (as SFT's samples), so the models learn
to stop; an empty prompt is the BOS token (or EOS), as for SFT.
"""

from __future__ import annotations

from typing import Any, Sequence


def _render(prompt: Any, completion: Any, tokenizer: Any, where: str) -> tuple[str, str, bool]:
    """(prompt text, completion text, whether to append EOS)."""
    if isinstance(completion, str):
        return (prompt if isinstance(prompt, str) else ""), completion, True
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{where}: chat messages need a tokenizer with a chat template; give plain text, "
                         f"or a tokenizer that has one")
    prompt = list(prompt or [])
    head = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) if prompt else ""
    whole = tokenizer.apply_chat_template(prompt + list(completion), tokenize=False)
    if not whole.startswith(head):
        raise ValueError(f"{where}: the chat template renders the prompt differently inside the conversation; "
                         f"give the prompt and completion as plain text")
    return head, whole[len(head):], False


def prompt_completion_ids(prompt: Any, completion: Any, tokenizer: Any, where: str,
                          append_eos: bool = True) -> tuple[list[int], list[int]]:
    """Token ids of the prompt (at least one) and of the completion (at least one)."""
    prompt_text, completion_text, plain = _render(prompt, completion, tokenizer, where)
    prompt_ids = list(tokenizer(prompt_text, add_special_tokens=False).input_ids) if prompt_text else []
    completion_ids = list(tokenizer(completion_text, add_special_tokens=False).input_ids)
    eos = tokenizer.eos_token_id
    if plain and append_eos and eos is not None and (not completion_ids or completion_ids[-1] != eos):
        completion_ids.append(eos)
    if not completion_ids:
        raise ValueError(f"{where}: the completion has no tokens; give some text")
    if not prompt_ids:
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
        prompt_ids = [start if start is not None else 0]
    return prompt_ids, completion_ids


def truncate(prompt_ids: list[int], completion_ids: list[int], max_length: int) -> tuple[list[int], list[int]]:
    """Together at most ``max_length`` tokens: the completion keeps its start, the prompt its end."""
    if max_length < 2:
        raise ValueError(f"train.seq_length: {max_length} leaves no room for a prompt token and a completion token")
    completion_ids = completion_ids[: max_length - 1]
    return prompt_ids[-(max_length - len(completion_ids)):], completion_ids


def check_behaviour(behaviour: Sequence[float], completion_ids: Sequence[int], where: str) -> None:
    """One behaviour log-prob per completion token (as tokenized, EOS included for plain text)."""
    if len(behaviour) != len(completion_ids):
        raise ValueError(f"{where}: behaviour_logprobs has {len(behaviour)} entries for the completion's "
                         f"{len(completion_ids)} tokens (EOS included for plain text); give one log-prob per token")
