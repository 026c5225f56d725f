"""A group of completions of one prompt runs the prompt through the model once.

GRPO and RLOO sample ``num_generations`` completions of every prompt (RFT
``n_generations_per_prompt``), so a batch holds each prompt several times. HF's ``generate``
and a plain forward run every row's prompt again. Here each distinct prompt (same ids, same
padding) runs once, its key/value cache is copied to every row that holds it, and only the
rest of each row runs on top of that cache. Causal attention makes this the same arithmetic
(prompt positions never attend to what follows them), and gradients flow back through the
copies to the prompt's single pass.

Both run the distinct prompts but their last token once; then every row feeds the rest:
- sampling: ``generate`` feeds the last prompt token and the new ones. The prefill draws no
  random numbers, so the samples are the same;
- scoring and training: the last prompt token and the response but its last token, whose
  logits [B, R, V] are those predicting each response token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlkit_accelerate.models.adapters import is_peft_model
from rlkit_accelerate.models.cache_name import CACHE_FIELD, output_cache
from rlkit_methods.engine_kit import position_ids_from_mask

# what makes generate feed rows other than one per prompt row, or bring its own cache
NOT_SHARED = ("past_key_values", "cache", "assistant_model", "prompt_lookup_num_tokens", "penalty_alpha", "inputs_embeds")


@dataclass
class PromptGroups:
    first: torch.Tensor  # (U,) a row holding each distinct prompt
    group: torch.Tensor  # (B,) which distinct prompt each row holds


def prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> PromptGroups | None:
    """The distinct prompts of a batch (ids and mask compared, in any row order); None when
    every row's prompt is different (nothing to share)."""
    rows = torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=1)
    distinct, group = torch.unique(rows, dim=0, return_inverse=True)
    if distinct.shape[0] == rows.shape[0]:
        return None
    first = torch.full((distinct.shape[0],), rows.shape[0], dtype=torch.long, device=rows.device)
    first = first.scatter_reduce(0, group, torch.arange(rows.shape[0], device=rows.device), reduce="amin")
    return PromptGroups(first=first, group=group)


def one_path(model: nn.Module, kwargs: dict[str, Any]) -> bool:
    """Whether ``generate(**kwargs)`` feeds each row once per step, in order, from its own
    cache (beam search reorders rows; assisted decoding feeds several tokens)."""
    beams = kwargs.get("num_beams") or getattr(getattr(model, "generation_config", None), "num_beams", 1) or 1
    return beams == 1 and not any(k in kwargs for k in NOT_SHARED)


def plain_causal_lm(model: nn.Module) -> bool:
    """A decoder-only HF model whose cache is its own (prompt learning puts virtual tokens in
    front of the input, or its prefix in the cache)."""
    config = getattr(model, "config", None)  # None for rlkit's wrappers, which share in their own generate
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    return not (is_peft_model(model) and model.active_peft_config.is_prompt_learning)


def prefill(lm: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, groups: PromptGroups):
    """One pass over the distinct prompts; their cache copied to every row [B, ...], or None if
    the model returned none to copy."""
    ids, mask = input_ids[groups.first], attention_mask[groups.first]
    out = lm(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=True,
             logits_to_keep=1)
    cache = output_cache(out)
    if cache is None or not hasattr(cache, "reorder_cache"):
        return None
    cache.reorder_cache(groups.group.to(ids.device))  # index_select per layer: differentiable
    return cache


def generate_sharing_prompts(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                             **kwargs: Any) -> torch.Tensor:
    """``model.generate(input_ids=..., attention_mask=..., **kwargs)`` with each distinct
    prompt's prefill computed once."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    groups = None
    if one_path(model, kwargs) and kwargs.get("num_return_sequences", 1) == 1 and input_ids.shape[1] >= 2 \
            and plain_causal_lm(model):
        groups = prompt_groups(input_ids, attention_mask)
    if groups is None:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    with torch.no_grad():  # generate feeds the last prompt token itself
        cache = prefill(model, input_ids[:, :-1], attention_mask[:, :-1], groups)
    if cache is None:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    return model.generate(input_ids=input_ids, attention_mask=attention_mask, **{CACHE_FIELD: cache}, **kwargs)


def response_logits_sharing_prompts(lm: nn.Module, query: torch.Tensor, query_mask: torch.Tensor,
                                    response: torch.Tensor, response_mask: torch.Tensor,
                                    groups: PromptGroups) -> torch.Tensor | None:
    """Logits [B, R, V] predicting each response token (position Q - 1 + t predicts token t),
    the prompts but their last token run once per distinct prompt; None if the model keeps no
    cache to share."""
    Q = query.shape[1]
    if Q < 2:
        return None
    cache = prefill(lm, query[:, :-1], query_mask[:, :-1], groups)
    if cache is None:
        return None
    # every row then feeds its last prompt token and its response but the last token (which
    # predicts nothing read here): R positions, the logits wanted, in place
    ids = torch.cat([query[:, -1:], response[:, :-1]], dim=1)  # (B, R)
    mask = torch.cat([query_mask, response_mask[:, :-1]], dim=1)  # (B, Q + R - 1): the cache's keys, then these
    position_ids = position_ids_from_mask(mask)[:, Q - 1:]
    return lm(input_ids=ids, attention_mask=mask, position_ids=position_ids, **{CACHE_FIELD: cache}, use_cache=True).logits
