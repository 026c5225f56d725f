"""A reward that scores with a trained reward model: ``reward: {name: reward_model, kwargs:
{path: DIR}}``, for PPO, GRPO, RLOO and RFT alike (the loop calls it on the main process).

``path`` is a sequence-classifier folder with one label and its tokenizer, as the
``reward_model`` method exports it (``trainer.save_pretrained``; any HF one works). Each sample
(prompt + output, as the reward model was trained on prompt + completion) is tokenized without
special tokens and right-padded, in batches of ``batch_size``, and scored where the classifier
reads a row: its last token.
"""

from __future__ import annotations

from typing import Callable


def reward_model_reward(path: str, batch_size: int = 32, device: str | None = None) -> Callable[..., list[float]]:
    """Reward factory: the model is loaded at the first call, once."""
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    loaded: dict = {}

    def load():
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            model = AutoModelForSequenceClassification.from_pretrained(path)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"reward_model {path!r}: cannot load a sequence classifier ({first})") from None
        if model.config.num_labels != 1:
            raise ValueError(f"reward_model {path!r}: has {model.config.num_labels} labels; a reward model has one")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"  # positions from 0 on every row's first token
        target = device or ("cuda" if torch.cuda.is_available() else "cpu")
        loaded.update(model=model.to(target).eval(), tokenizer=tokenizer, device=target)

    def reward_fn(samples, prompts=None, outputs=None, **kwargs) -> list[float]:
        import torch

        if not loaded:
            load()
        model, tokenizer, scores = loaded["model"], loaded["tokenizer"], []
        for i in range(0, len(samples), batch_size):
            batch = tokenizer(list(samples[i : i + batch_size]), add_special_tokens=False, padding=True, return_tensors="pt")
            with torch.no_grad():
                logits = model(**{k: v.to(loaded["device"]) for k, v in batch.items()}).logits  # (B, 1)
            scores += logits[:, 0].float().cpu().tolist()
        return scores

    return reward_fn
