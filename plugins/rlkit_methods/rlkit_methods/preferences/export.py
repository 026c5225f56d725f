"""What a reward model is, for the engines that build and export one (``ModelSpec("value",
options={"score_head": True})``): HF's sequence-classifier head and export format.

HF's ``*ForSequenceClassification`` models put ``score``, one bias-free linear map, on the
backbone's last hidden state (after the final norm) and read it at each row's last
non-padding token. The engines build that map, starting at zero (every completion's reward is
0 before training, the same on every engine), so the export is the backbone's own weights (the
causal LM's state without its LM head) plus ``score.weight``, with the config's architecture
switched: ``AutoModelForSequenceClassification.from_pretrained`` loads it with no missing keys
and no second model is built to write it.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlkit_core.errors import ConfigError


def make_score_head(hidden_size: int, dtype: torch.dtype | None = None, device=None) -> nn.Linear:
    """Linear(h, 1, bias=False), zero: r(x, y) = 0 for every completion before training."""
    head = nn.Linear(hidden_size, 1, bias=False, dtype=dtype, device=device)
    nn.init.zeros_(head.weight)
    return head


def sequence_classifier_architecture(config: Any) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    name = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(config.model_type)
    if name is None:
        raise ConfigError(f"model.model_path: transformers has no sequence classifier for {config.model_type!r} models, "
                          f"so a reward model of it cannot be exported; use a causal LM type it has one for")
    return name


def save_sequence_classifier(base_model: nn.Module, score_weight: torch.Tensor, directory: str | os.PathLike,
                             state_dict: dict[str, Any] | None = None) -> None:
    """``directory`` as ``AutoModelForSequenceClassification`` writes it (one label), from an
    HF causal LM and the (1, H) score weight. ``state_dict``: the LM's full state gathered from
    a sharded engine (its own otherwise)."""
    from safetensors.torch import save_file

    config = copy.deepcopy(base_model.config)
    config.architectures = [sequence_classifier_architecture(config)]
    config.num_labels = 1
    head = base_model.get_output_embeddings()
    head_names = tuple(n + "." for n, m in base_model.named_modules() if m is head)
    state = state_dict if state_dict is not None else base_model.state_dict()
    # clones: a tied LM head shares the embedding's storage, which safetensors refuses
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state.items() if not k.startswith(head_names)}
    tensors["score.weight"] = score_weight.detach().cpu().contiguous().clone()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    save_file(tensors, os.fspath(directory / "model.safetensors"), metadata={"format": "pt"})
