"""A reward model's scalar head and its export as a plain HF sequence classifier.

HF's ``*ForSequenceClassification`` models put ``score``, one bias-free linear map, on the
backbone's last hidden state (after the final norm) and read it at each row's last
non-padding token. The head here is that map, so the export is the backbone's own weights
(the causal LM's state without its LM head) plus ``score.weight``, with the config's
architecture switched: ``AutoModelForSequenceClassification.from_pretrained`` loads it with no
missing keys and no second model is built to write it.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlkit_core.errors import ConfigError


def make_score_head(hidden_size: int, weight: torch.Tensor, std: float = 0.02) -> nn.Linear:
    """Linear(h, 1, bias=False) with HF's initialisation (normal, ``initializer_range``)."""
    head = nn.Linear(hidden_size, 1, bias=False, dtype=weight.dtype, device=weight.device)
    nn.init.normal_(head.weight, std=std)
    return head


def sequence_classifier_architecture(config: Any) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    name = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(config.model_type)
    if name is None:
        raise ConfigError(f"model.model_path: transformers has no sequence classifier for {config.model_type!r} models, "
                          f"so a reward model of it cannot be exported; use a causal LM type it has one for")
    return name


def save_sequence_classifier(base_model: nn.Module, score: nn.Linear, directory: str | os.PathLike,
                             state_dict: dict[str, Any] | None = None, score_state: dict[str, Any] | None = None) -> None:
    """``directory`` as ``AutoModelForSequenceClassification`` writes it (one label).

    ``state_dict``/``score_state``: the full states gathered from a sharded engine."""
    from safetensors.torch import save_file

    config = copy.deepcopy(base_model.config)
    config.architectures = [sequence_classifier_architecture(config)]
    config.num_labels = 1
    head = base_model.get_output_embeddings()
    head_names = tuple(n + "." for n, m in base_model.named_modules() if m is head)
    state = state_dict if state_dict is not None else base_model.state_dict()
    # clones: a tied LM head shares the embedding's storage, which safetensors refuses
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state.items() if not k.startswith(head_names)}
    score_weight = (score_state or score.state_dict())["weight"]
    tensors["score.weight"] = score_weight.detach().cpu().contiguous().clone()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    save_file(tensors, os.fspath(directory / "model.safetensors"), metadata={"format": "pt"})
