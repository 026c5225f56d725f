"""trlX's ILQL model classes over rlkit's: ``AutoModelForCausalLMWithILQLHeads`` and
``AutoModelForSeq2SeqLMWithILQLHeads``, with trlX's constructor, ``forward`` (a tuple, or
with ``return_dict`` an output object) and ``generate`` arguments (``max_length``;
``decoder_input_ids`` for seq2seq, whose ``generate`` returns the decoder ids as trlX's does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from transformers.utils import ModelOutput

from rlkit_accelerate.models.blocks import capture_head_input, position_ids_from_mask
from rlkit_accelerate.models.cache_name import CACHE_FIELD, RENAMED, output_cache
from rlkit_accelerate.models.ilql_heads import CausalLMWithILQLHeads
from rlkit_accelerate.models.seq2seq_ilql import Seq2SeqLMWithILQLHeads
from rlkit_accelerate.models.trlx_base import TrlxWrapper
from rlkit_accelerate.models.trlx_ppo import _given, _with_peft


@dataclass
class CausalILQLOutput(ModelOutput):
    logits: Optional[torch.FloatTensor] = None
    if RENAMED:  # transformers >= 5.24
        cache: Optional[Any] = None
    else:
        past_key_values: Optional[Any] = None
    hidden_states: Optional[tuple[torch.FloatTensor, ...]] = None
    value: Optional[torch.FloatTensor] = None
    qs: Optional[tuple[torch.FloatTensor, ...]] = None
    target_qs: Optional[tuple[torch.FloatTensor, ...]] = None


@dataclass
class Seq2SeqILQLOutput(ModelOutput):
    logits: Optional[torch.FloatTensor] = None
    if RENAMED:  # transformers >= 5.24
        cache: Optional[Any] = None
    else:
        past_key_values: Optional[Any] = None
    hidden_states: Optional[tuple[torch.FloatTensor, ...]] = None
    value: Optional[torch.FloatTensor] = None
    qs: Optional[tuple[torch.FloatTensor, ...]] = None
    target_qs: Optional[tuple[torch.FloatTensor, ...]] = None
    encoder_outputs: Optional[tuple[Any, ...]] = None


def _max_new(max_new_tokens: int, max_length: int, prompt_length: int) -> int:
    return max(0, min(max_new_tokens, max_length - prompt_length))


class _ILQLAPI(TrlxWrapper):
    _wrapper_args = ("two_qs", "alpha", "num_layers_unfrozen")
    _head_names = ("ilql_heads",)

    @property
    def two_qs(self) -> bool:
        return self.ilql_heads.two_qs


class AutoModelForCausalLMWithILQLHeads(_ILQLAPI, CausalLMWithILQLHeads):
    """trlX's causal LM with ILQL heads (V, Q, target Q)."""

    def __init__(self, base_model: Any, *, two_qs: bool = True, alpha: float = 0.99, peft_config: Any = None,
                 num_layers_unfrozen: int = -1):
        CausalLMWithILQLHeads.__init__(self, _with_peft(base_model, peft_config, "CAUSAL_LM"), two_qs=two_qs,
                                       alpha=alpha, num_layers_unfrozen=num_layers_unfrozen)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        actions_ixs: torch.Tensor | None = None,
        states_ixs: torch.Tensor | None = None,
        return_dict: bool = False,
        bypass_peft_prompt_adapter: bool = False,
        output_hidden_states: bool | None = None,
        use_cache: bool | None = None,
    ):
        """``(logits, qs, target_qs, vs, past_key_values)``, or a ``CausalILQLOutput``."""
        if position_ids is None and attention_mask is not None and past_key_values is None:
            position_ids = position_ids_from_mask(attention_mask)
        inputs = _given(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        **{CACHE_FIELD: past_key_values}, use_cache=use_cache, output_hidden_states=output_hidden_states)
        with capture_head_input(self.layout.lm_head) as captured:
            out = self.base_model(**inputs, return_dict=True)
        qs, target_qs, vs = self.ilql_heads(captured["hidden"], states_ixs, actions_ixs)
        if return_dict:
            return CausalILQLOutput(out.logits, output_cache(out), out.get("hidden_states"), vs, qs, target_qs)
        return out.logits, qs, target_qs, vs, output_cache(out)

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, position_ids: Any = None,
                 past_key_values: Any = None, beta: float = 1, max_new_tokens: int = 32, max_length: int = 1024,
                 temperature: float = 1, top_k: int = 20, logit_mask: Any = None, pad_token_id: int | None = None,
                 eos_token_id: int | None = None) -> torch.Tensor:
        """trlX's Q-guided sampling: prompt + new tokens; at most ``max_length`` tokens in all."""
        if position_ids is not None or past_key_values is not None:
            raise ValueError("generate: positions follow the attention mask and the cache is built here; "
                             "pass input_ids and attention_mask only")
        return CausalLMWithILQLHeads.generate(
            self, input_ids, attention_mask, beta=beta, top_k=top_k, temperature=temperature,
            max_new_tokens=_max_new(max_new_tokens, max_length, input_ids.shape[1]), logit_mask=logit_mask,
            eos_token_id=eos_token_id, pad_token_id=pad_token_id,
        )


class AutoModelForSeq2SeqLMWithILQLHeads(_ILQLAPI, Seq2SeqLMWithILQLHeads):
    """trlX's encoder-decoder LM with ILQL heads on the decoder."""

    _arch = "seq2seq"

    def __init__(self, base_model: Any, *, two_qs: bool = True, alpha: float = 0.99, peft_config: Any = None,
                 num_layers_unfrozen: int = -1):
        Seq2SeqLMWithILQLHeads.__init__(self, _with_peft(base_model, peft_config, "SEQ_2_SEQ_LM"), two_qs=two_qs,
                                        alpha=alpha, num_layers_unfrozen=num_layers_unfrozen)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        actions_ixs: torch.Tensor | None = None,
        states_ixs: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool = False,
        bypass_peft_prompt_adapter: bool = False,
        use_cache: bool | None = None,
    ):
        """``(logits, qs, target_qs, vs, past_key_values, encoder_outputs)`` over the decoder
        positions, or a ``Seq2SeqILQLOutput``."""
        inputs = _given(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                        decoder_attention_mask=decoder_attention_mask, past_key_values=past_key_values,
                        decoder_inputs_embeds=decoder_inputs_embeds, encoder_outputs=encoder_outputs, use_cache=use_cache,
                        output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        with capture_head_input(self.layout.lm_head) as captured:
            out = self.base_model(**inputs, return_dict=True)
        qs, target_qs, vs = self.ilql_heads(captured["hidden"], states_ixs, actions_ixs)
        encoder = (out.get("encoder_last_hidden_state"), out.get("encoder_hidden_states"), out.get("encoder_attentions"))
        if return_dict:
            return Seq2SeqILQLOutput(out.logits, output_cache(out), out.get("decoder_hidden_states"), vs, qs,
                                     target_qs, encoder)
        return out.logits, qs, target_qs, vs, output_cache(out), encoder

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 decoder_attention_mask: Any = None, decoder_input_ids: torch.Tensor | None = None,
                 past_key_values: Any = None, encoder_outputs: Any = None, beta: float = 1, max_new_tokens: int = 32,
                 max_length: int = 1024, temperature: float = 1, top_k: int = 20, logit_mask: Any = None,
                 pad_token_id: int | None = None, eos_token_id: int | None = None) -> torch.Tensor:
        """trlX's Q-guided decoding from ``decoder_input_ids`` (default: the start token);
        returns the decoder ids, prefix included, as trlX's does."""
        if past_key_values is not None or encoder_outputs is not None:
            raise ValueError("generate: the encoder runs and the cache is built here; pass input_ids (and decoder_input_ids)")
        if decoder_input_ids is None:
            decoder_input_ids = torch.full((input_ids.shape[0], 1), self.layout.decoder_start_token_id,
                                           dtype=torch.long, device=input_ids.device)
        out = Seq2SeqLMWithILQLHeads.generate(
            self, input_ids, attention_mask, beta=beta, top_k=top_k, temperature=temperature,
            max_new_tokens=_max_new(max_new_tokens, max_length, input_ids.shape[1]), logit_mask=logit_mask,
            eos_token_id=eos_token_id, pad_token_id=pad_token_id, decoder_input_ids=decoder_input_ids,
        )
        return torch.cat([decoder_input_ids.to(out.device), out[:, input_ids.shape[1]:]], dim=1)
