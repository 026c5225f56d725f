"""``PromptPipeline``: trlX's tokenizing prompt pipeline (``train.pipeline: PromptPipeline``)."""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import torch
from torch.utils.data import Dataset

from rlkit_methods.data.chat import is_conversation
from rlkit_methods.data.padding import pad, position_ids_from_mask
from rlkit_methods.data.trlx_loader import TrlxLoader


def apply_chat_template(texts: Sequence[str], tokenizer: Any, template: bool | str) -> list[str]:
    """Each text as the user turn of a chat, followed by the assistant's header (the model
    answers from there): the tokenizer's own template for True, else the Jinja string."""
    own = getattr(tokenizer, "chat_template", None)
    if template is True and not own:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(f"tokenizer.chat_template: true, but the tokenizer {name!r} has no chat template; "
                         f"give the template itself as a Jinja string, or set chat_template: null")
    kwargs = {} if template is True else {"chat_template": template}
    return [tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                          add_generation_prompt=True, **kwargs) for text in texts]


def render_conversation(prompt: Any, tokenizer: Any, template: bool | str | None, where: str) -> str:
    """A conversational prompt (``{"messages": [...]}`` or a list of turns) as the template's
    text, ending with the assistant's header: the config's template string, else the tokenizer's."""
    messages = list(prompt["messages"] if isinstance(prompt, Mapping) else prompt)
    kwargs = {"chat_template": template} if isinstance(template, str) else {}
    if not kwargs and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{where}: a messages prompt needs a chat template; set tokenizer.chat_template (a Jinja "
                         f"string) or use a tokenizer that has one")
    if any(not isinstance(turn, Mapping) or not {"role", "content"} <= set(turn) for turn in messages):
        raise ValueError(f"{where}: every message needs 'role' and 'content'")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


class PromptPipeline(TrlxLoader, Dataset):
    """Prompts for rollouts or evaluation, tokenized once and left-padded per batch.

    :param prompts: strings (an empty string or None becomes the BOS token, else EOS), or dicts with a ``"prompt"`` key whose other keys are passed
        along to the reward and metric functions as keyword arguments (one list per key), or
        conversations (``{"messages": [...]}`` with such keys, or a list of turns) rendered
        with the chat template up to the assistant's turn
    :param max_prompt_length: ``seq_length - max_new_tokens``; longer prompts are truncated
        on the tokenizer's ``truncation_side`` with a warning, never dropped
    :param tokenizer: a transformers tokenizer
    :param add_special_tokens: passed to the tokenizer (True for seq2seq models)
    :param chat_template: ``tokenizer.chat_template``: wrap each prompt as a user turn of the
        tokenizer's chat template (True) or of this Jinja template (a string), ending where
        the assistant answers; None or False leaves prompts as they are
    """

    def __init__(
        self,
        prompts: Sequence[str | Mapping[str, Any]],
        max_prompt_length: int,
        tokenizer: Any,
        add_special_tokens: bool = False,
        chat_template: bool | str | None = None,
    ):
        super().__init__()
        if max_prompt_length <= 0:
            raise ValueError(f"max_prompt_length: must be > 0, got {max_prompt_length}; raise train.seq_length")
        prompts = list(prompts)
        if not prompts:
            raise ValueError("prompts: the list is empty; give at least one prompt")
        texts, metadata, rendered = [], [], set()
        for i, prompt in enumerate(prompts):
            if is_conversation(prompt):  # TRL's conversational prompt: rendered up to the assistant's turn
                extra = {k: v for k, v in prompt.items() if k != "messages"} if isinstance(prompt, Mapping) else {}
                texts.append(render_conversation(prompt, tokenizer, chat_template, f"prompts[{i}]"))
                metadata.append(extra)
                rendered.add(i)
                continue
            if isinstance(prompt, Mapping):
                if "prompt" not in prompt:
                    raise ValueError(f"prompts[{i}]: a dict prompt needs a 'prompt' key, got keys {sorted(prompt)}")
                extra = {k: v for k, v in prompt.items() if k != "prompt"}  # never mutate the caller's dict
                prompt = prompt["prompt"]
            else:
                extra = {}
            if prompt is None:  # e.g. the core's default ``[tokenizer.bos_token] * n`` without a BOS
                prompt = ""
            if not isinstance(prompt, str):
                raise ValueError(f"prompts[{i}]: expected a string, got {type(prompt).__name__}")
            texts.append(prompt)
            metadata.append(extra)
        keys = [sorted(m) for m in metadata]
        if any(k != keys[0] for k in keys):
            raise ValueError("prompts: every dict prompt must have the same keys")

        if chat_template:
            plain = [i for i in range(len(texts)) if i not in rendered]
            for i, text in zip(plain, apply_chat_template([texts[i] for i in plain], tokenizer, chat_template)):
                texts[i] = text
        if chat_template or rendered:
            add_special_tokens = False  # the template writes the special tokens it wants
        encoded = tokenizer(texts, truncation=False, padding=False, add_special_tokens=add_special_tokens)
        left = getattr(tokenizer, "truncation_side", "right") == "left"
        truncated = []
        self.prompts = []
        for i, (ids, extra) in enumerate(zip(encoded["input_ids"], metadata)):
            ids = list(ids)
            if len(ids) > max_prompt_length:
                truncated.append(i)
                ids = ids[-max_prompt_length:] if left else ids[:max_prompt_length]
            if not ids:
                fallback = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
                if fallback is None:
                    raise ValueError(f"prompts[{i}]: empty prompt and the tokenizer has no BOS/EOS token to use")
                ids = [fallback]
            self.prompts.append({"input_ids": ids, "attention_mask": [1] * len(ids), **extra})
        if truncated:
            warnings.warn(
                f"{len(truncated)} prompt(s) longer than {max_prompt_length} tokens (seq_length - max_new_tokens) "
                f"were truncated on the {'left' if left else 'right'}, first: prompts[{truncated[0]}]",
                stacklevel=2,
            )
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def __getitem__(self, ix: int) -> dict[str, Any]:
        return self.prompts[ix]

    def __len__(self) -> int:
        return len(self.prompts)

    def collate(self, xs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Left-pad a batch: ``input_ids``, ``attention_mask``, ``position_ids`` (B, T) and
        each metadata key as a list."""
        input_ids = pad([torch.tensor(x["input_ids"], dtype=torch.long) for x in xs], self.pad_token_id or 0, "left")
        attention_mask = pad([torch.tensor(x["attention_mask"], dtype=torch.long) for x in xs], 0, "left")
        out: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids_from_mask(attention_mask),
        }
        for key in xs[0]:
            if key not in out:
                out[key] = [x[key] for x in xs]
        return out

