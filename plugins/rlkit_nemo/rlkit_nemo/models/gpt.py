"""A megatron-core ``GPTModel`` that also hands its final hidden states to rlkit's heads.

``HeadedGPTModel`` is Megatron's GPT with one change: on the last pipeline stage,
``forward`` returns ``(logits, head_outputs)`` where the heads (value head for PPO, ILQL's
V/Q heads) run on the final-layernorm hidden states of the same forward pass. Logits stay
vocab-parallel (B, T, V / tp); earlier stages return hidden states for the pipeline.

A packed sequence (``packed``, :mod:`rlkit_nemo.packing`): rotary angles from each token's
own position, and the last stage's logits and the heads' hidden states scattered back to
the rows' padded layout.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

from megatron.core.models.gpt import GPTModel
from megatron.core.tensor_parallel import gather_from_sequence_parallel_region
from megatron.core.transformer import TransformerConfig

from rlkit_nemo.models.heads import ScoreHead


class HeadedGPTModel(GPTModel):
    """Megatron GPT plus ``heads`` (built by ``make_heads(config, vocab_size)`` on the last stage only)."""

    def __init__(self, *, make_heads: Optional[Callable[[TransformerConfig, int], nn.Module]] = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.heads = make_heads(self.config, self.vocab_size) if (make_heads is not None and self.post_process) else None
        self._head_kwargs: dict[str, Any] = {}
        self._last_position_only = False
        self._packed: Optional[dict[str, Any]] = None

    def forward(self, input_ids, position_ids, attention_mask, *, head_kwargs: Optional[dict] = None,
                last_position_only: bool = False, packed: Optional[dict] = None, **kwargs):
        """``last_position_only``: the logits and heads of the final position only, (B, 1, ...)
        (sampling; the heads' indices then index that one position). An ``inference_context``
        (megatron-core's KV cache) passes through to the attention layers. ``packed``: the
        inputs are one packed sequence (1, L) of the rows :func:`rlkit_nemo.packing.pack_inputs`
        describes; the outputs come back in their (B, T) layout."""
        # GPTModel routes the hidden states through _preprocess and _postprocess; the heads'
        # extra inputs (ILQL's state/action indices) and the packing wait here for this call
        self._head_kwargs, self._last_position_only, self._packed = head_kwargs or {}, last_position_only, packed
        try:
            return super().forward(input_ids, position_ids, attention_mask, **kwargs)
        finally:
            self._head_kwargs, self._last_position_only, self._packed = {}, False, None

    def _preprocess(self, input_ids, position_ids, **kwargs):
        out = super()._preprocess(input_ids, position_ids, **kwargs)
        if self._packed is None or out[1] is None:
            return out
        # rotary angles at each token's own position, not its index in the packed sequence. A
        # score depends on the difference of two positions only, so the index would give the
        # same scores in exact arithmetic; the rows' own keep the angles (and their float
        # error, which grows with the angle) those of the padded rows. megatron-core's
        # (S, 1, 1, d) table, read at the positions: (L, 1, 1, d)
        positions = position_ids.reshape(-1)
        table = self.rotary_pos_emb(int(positions.max()) + 1)
        return (out[0], table[positions], *out[2:])

    def _postprocess(self, hidden_states, **kwargs):
        if self.post_process and self._last_position_only:
            hidden_states = hidden_states[-1:]  # (1, B, H): never the (B, T, V / tp) logits
        # the logits stay vocab-parallel: Megatron's inference mode would gather them over TP
        kwargs["inference_context"] = None
        # a reward model reads its score head alone: no output layer over the vocabulary
        scores_only = self.post_process and isinstance(self.heads, ScoreHead)
        logits = None if scores_only else super()._postprocess(hidden_states=hidden_states, **kwargs)
        if not self.post_process:
            return logits
        if self._packed is not None and logits is not None:  # (1, L, V / tp) -> the rows' (B, T, V / tp)
            from rlkit_nemo.packing import unpack

            logits = unpack(logits[0], self._packed)
        if self.heads is None:
            return logits
        if self.config.sequence_parallel:
            hidden_states = gather_from_sequence_parallel_region(hidden_states)
        hidden = unpack(hidden_states[:, 0], self._packed) if self._packed is not None else hidden_states.transpose(0, 1)
        return logits, self.heads(hidden, **self._head_kwargs)  # heads see (B, T, H)


def causal_padding_mask(attention_mask: torch.Tensor, queries: Optional[int] = None) -> torch.Tensor:
    """(B, T) 1 = token, 0 = padding -> Megatron's (B, 1, T, T) boolean mask, True = hidden;
    with ``queries``, the rows of the last ``queries`` positions only, (B, 1, queries, T) (the
    new tokens of a KV-cached step attend to every key so far)."""
    T = attention_mask.shape[1]
    keys = torch.arange(T, device=attention_mask.device)
    future = keys[None, :] > keys[T - (queries or T):, None]  # (queries, T)
    padded_keys = attention_mask[:, None, None, :] == 0  # (B, 1, 1, T)
    return future[None, None] | padded_keys

