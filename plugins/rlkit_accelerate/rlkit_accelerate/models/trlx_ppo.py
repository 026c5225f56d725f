"""trlX's PPO model classes over rlkit's policies: ``AutoModelForCausalLMWithValueHead``,
``AutoModelForCausalLMWithHydraValueHead`` and their seq2seq twins, with trlX's constructor,
``forward(return_dict=..., output_hidden_states=...)``, ``forward_hydra`` and ``frozen_head``.

``forward`` runs the transformers model itself (so ``past_key_values``, ``hidden_states`` and
``attentions`` come back as in trlX) and reads the value head from the LM head's input.
Called with rlkit's arguments (``response_ids``, ``trunk``, ...) it is rlkit's ``forward``, so
rlkit's trainers can use these classes too. Positions follow the real tokens under left
padding (trlX used 0..T-1 whatever the padding).
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Optional

import torch
from transformers.utils import ModelOutput

from rlkit_accelerate.models.adapters import apply_peft, is_peft_model
from rlkit_accelerate.models.blocks import capture_head_input, eval_mode, position_ids_from_mask, run_blocks, run_post
from rlkit_accelerate.models.cache_name import CACHE_FIELD, RENAMED, output_cache
from rlkit_accelerate.models.heads import hydra_reference
from rlkit_accelerate.models.policy import CausalLMWithValueHead
from rlkit_accelerate.models.seq2seq import Seq2SeqLMWithValueHead
from rlkit_accelerate.models.trlx_base import TrlxWrapper

RLKIT_FORWARD_ARGS = ("trunk", "return_hidden", "response_ids", "response_mask", "trunk_hidden")


@dataclass
class CausalLMOutputWithValue(ModelOutput):
    loss: Optional[torch.FloatTensor] = None
    logits: Optional[torch.FloatTensor] = None
    if RENAMED:  # transformers >= 5.24
        cache: Optional[Any] = None
    else:
        past_key_values: Optional[Any] = None
    hidden_states: Optional[tuple[torch.FloatTensor, ...]] = None
    attentions: Optional[tuple[torch.FloatTensor, ...]] = None
    cross_attentions: Optional[tuple[torch.FloatTensor, ...]] = None
    value: Optional[torch.FloatTensor] = None


@dataclass
class Seq2SeqLMOutputWithValue(ModelOutput):
    loss: Optional[torch.FloatTensor] = None
    logits: Optional[torch.FloatTensor] = None
    if RENAMED:  # transformers >= 5.24
        cache: Optional[Any] = None
    else:
        past_key_values: Optional[Any] = None
    decoder_hidden_states: Optional[tuple[torch.FloatTensor, ...]] = None
    decoder_attentions: Optional[tuple[torch.FloatTensor, ...]] = None
    cross_attentions: Optional[tuple[torch.FloatTensor, ...]] = None
    encoder_last_hidden_state: Optional[torch.FloatTensor] = None
    encoder_hidden_states: Optional[tuple[torch.FloatTensor, ...]] = None
    encoder_attentions: Optional[tuple[torch.FloatTensor, ...]] = None
    value: Optional[torch.FloatTensor] = None


def _given(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


def _with_peft(base_model: Any, peft_config: Any, task_type: str) -> Any:
    return base_model if peft_config is None or is_peft_model(base_model) else apply_peft(base_model, peft_config, task_type)


class _ValueHeadAPI(TrlxWrapper):
    """trlX's attributes and the reference handling shared by the causal and seq2seq classes."""

    _head_names = ("v_head", "value_branch")

    @property
    def peft_config(self) -> Any:
        return self.base_model.active_peft_config if self.uses_adapters else None

    @property
    def peft_type(self) -> str | None:
        config = self.peft_config
        return None if config is None else str(getattr(config.peft_type, "value", config.peft_type))

    @property
    def frozen_head(self):
        """The hydra reference (top blocks, final norm, LM head), or None (``-1``, adapters)."""
        return self.reference if not self.uses_adapters and self.num_layers_unfrozen >= 0 else None

    def reset_reference(self) -> None:
        if self.reference is None:
            return
        if self.num_layers_unfrozen < 0:
            self.reference = copy.deepcopy(self.base_model).requires_grad_(False).eval()
        else:
            self.reference = hydra_reference(self.layout, self.num_layers_unfrozen)

    def _adapters_off(self, off: bool):
        return self.base_model.disable_adapter() if off and self.uses_adapters else nullcontext()

    def _frozen_forward(self, **inputs: Any) -> Any:
        """The reference without a hydra branch: the frozen copy of the whole model, or the
        model with its adapters off; in eval mode, as a fixed target is."""
        net = self.base_model if self.uses_adapters else self.reference
        with eval_mode(net), self._adapters_off(True):
            return net(**inputs, use_cache=False, output_hidden_states=True, return_dict=True)

    def _reference_states(self, trunk: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Logits of the hydra reference from ``hidden`` at its branch point, and the hidden
        states it went through (the last after the final norm, as transformers reports them)."""
        states = [hidden]
        for block in self.reference.blocks:
            hidden = run_blocks([block], hidden, trunk)
            states.append(hidden)
        final = run_post(self.reference.post, hidden)
        return self.reference.head(final), (*states[:-1], final)


class AutoModelForCausalLMWithValueHead(_ValueHeadAPI, CausalLMWithValueHead):
    """trlX's causal LM with a value head (no reference model)."""

    _wrapper_args = ("num_value_layers_unfrozen",)

    def __init__(self, base_model: Any, peft_config: Any = None, num_value_layers_unfrozen: int = 0):
        CausalLMWithValueHead.__init__(self, _with_peft(base_model, peft_config, "CAUSAL_LM"), num_layers_unfrozen=-1,
                                       num_value_layers_unfrozen=num_value_layers_unfrozen, with_reference=False)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        position_ids: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        ignore_peft_adapter: bool | None = None,
        **rlkit_args: Any,
    ):
        """trlX's forward: logits, value [B, T] (and cache, hidden states, attentions); a
        ``CausalLMOutputWithValue``, or with a false ``return_dict`` its tuple ending in value."""
        if any(rlkit_args.get(name) is not None for name in RLKIT_FORWARD_ARGS):
            return CausalLMWithValueHead.forward(self, input_ids, attention_mask, position_ids, **rlkit_args)
        if position_ids is None and attention_mask is not None and past_key_values is None and inputs_embeds is None:
            position_ids = position_ids_from_mask(attention_mask)
        inputs = _given(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, head_mask=head_mask,
                        **{CACHE_FIELD: past_key_values}, inputs_embeds=inputs_embeds, use_cache=use_cache,
                        output_attentions=output_attentions)
        with capture_head_input(self.layout.lm_head) as captured, self._adapters_off(bool(ignore_peft_adapter)):
            out = self.base_model(**inputs, output_hidden_states=True, return_dict=True)
        if self.value_branch is None:
            value = self.v_head(captured["hidden"]).squeeze(-1)  # [B, T]
        elif past_key_values is not None:
            raise ValueError("num_value_layers_unfrozen > 0: the value branch needs the whole sequence, not past_key_values")
        else:
            value = CausalLMWithValueHead.forward(self, input_ids, attention_mask, position_ids).values
        result = CausalLMOutputWithValue(logits=out.logits, **{CACHE_FIELD: output_cache(out)},
                                         hidden_states=out.hidden_states, attentions=out.get("attentions"))
        if not return_dict:
            return result.to_tuple() + (value,)
        result.value = value
        return result


class AutoModelForCausalLMWithHydraValueHead(AutoModelForCausalLMWithValueHead):
    """trlX's PPO policy: value head plus the frozen reference (hydra branch over the top
    ``num_layers_unfrozen`` blocks, or a whole frozen copy for ``-1``)."""

    _wrapper_args = ("num_layers_unfrozen", "num_value_layers_unfrozen")

    def __init__(self, base_model: Any, *, num_layers_unfrozen: int = -1, peft_config: Any = None,
                 num_value_layers_unfrozen: int = 0):
        CausalLMWithValueHead.__init__(self, _with_peft(base_model, peft_config, "CAUSAL_LM"),
                                       num_layers_unfrozen=num_layers_unfrozen,
                                       num_value_layers_unfrozen=num_value_layers_unfrozen)

    @torch.no_grad()
    def forward_hydra(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        position_ids: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ):
        """The reference's logits [B, T, V] (the initial policy's); with ``return_dict`` a
        ``CausalLMOutputWithValue`` with them and the reference's hidden states."""
        if past_key_values is not None or inputs_embeds is not None:
            raise ValueError("forward_hydra: pass input_ids (the reference reads the whole sequence)")
        if position_ids is None and attention_mask is not None:
            position_ids = position_ids_from_mask(attention_mask)
        if self.frozen_head is None:  # adapters off, or the frozen copy of the whole model
            out = self._frozen_forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
            logits, states = out.logits, out.hidden_states
        else:
            trunk = self.forward_trunk(input_ids, attention_mask, position_ids)
            split = self.layout.num_blocks - self.num_layers_unfrozen
            hidden = run_blocks(self.layout.blocks[trunk.index : split], trunk.hidden, trunk)
            logits, states = self._reference_states(trunk, hidden)
        if not return_dict:
            return logits
        return CausalLMOutputWithValue(logits=logits, hidden_states=states if output_hidden_states else None)


class AutoModelForSeq2SeqLMWithValueHead(_ValueHeadAPI, Seq2SeqLMWithValueHead):
    """trlX's encoder-decoder LM with a value head on the decoder (no reference model)."""

    _wrapper_args = ("num_value_layers_unfrozen",)
    _arch = "seq2seq"

    def __init__(self, base_model: Any, peft_config: Any = None, num_value_layers_unfrozen: int = 0):
        Seq2SeqLMWithValueHead.__init__(self, _with_peft(base_model, peft_config, "SEQ_2_SEQ_LM"), num_layers_unfrozen=-1,
                                        num_value_layers_unfrozen=num_value_layers_unfrozen, with_reference=False)
        self.value_branch = None

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        decoder_head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        ignore_peft_adapter: bool | None = None,
        **rlkit_args: Any,
    ):
        """trlX's forward over ``decoder_input_ids``: a ``Seq2SeqLMOutputWithValue`` with the
        logits and the value [B, D] of every decoder position."""
        if any(rlkit_args.get(name) is not None for name in RLKIT_FORWARD_ARGS):
            return Seq2SeqLMWithValueHead.forward(self, input_ids, attention_mask, **rlkit_args)
        inputs = _given(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                        decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
                        **{CACHE_FIELD: past_key_values}, inputs_embeds=inputs_embeds, head_mask=head_mask,
                        decoder_inputs_embeds=decoder_inputs_embeds, decoder_head_mask=decoder_head_mask,
                        cross_attn_head_mask=cross_attn_head_mask, use_cache=use_cache, output_attentions=output_attentions)
        with capture_head_input(self.layout.lm_head) as captured, self._adapters_off(bool(ignore_peft_adapter)):
            out = self.base_model(**inputs, output_hidden_states=True, return_dict=True)
        return Seq2SeqLMOutputWithValue(**{k: v for k, v in out.items() if k != "loss"}, loss=out.get("loss"),
                                        value=self.v_head(captured["hidden"]).squeeze(-1))


class AutoModelForSeq2SeqLMWithHydraValueHead(AutoModelForSeq2SeqLMWithValueHead):
    """trlX's seq2seq PPO policy: value head plus the frozen reference over the top
    ``num_layers_unfrozen`` decoder blocks (a whole frozen copy for ``-1``)."""

    _wrapper_args = ("num_layers_unfrozen", "num_value_layers_unfrozen")

    def __init__(self, base_model: Any, *, num_layers_unfrozen: int = -1, peft_config: Any = None,
                 num_value_layers_unfrozen: int = 0):
        Seq2SeqLMWithValueHead.__init__(self, _with_peft(base_model, peft_config, "SEQ_2_SEQ_LM"),
                                        num_layers_unfrozen=num_layers_unfrozen,
                                        num_value_layers_unfrozen=num_value_layers_unfrozen)
        self.value_branch = None

    @torch.no_grad()
    def forward_hydra(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **unused: Any,
    ):
        """The reference's logits [B, D, V] over ``decoder_input_ids``; with ``return_dict`` a
        ``Seq2SeqLMOutputWithValue`` with them and the reference's decoder hidden states."""
        if self.frozen_head is None:
            out = self._frozen_forward(input_ids=input_ids, attention_mask=attention_mask,
                                       decoder_input_ids=decoder_input_ids, decoder_attention_mask=decoder_attention_mask)
            logits, states = out.logits, out.decoder_hidden_states
        else:
            encoder_hidden = self.layout.encode(input_ids, attention_mask)  # [B, S, H]
            trunk = self.layout.decoder_trunk(self.branch_index, encoder_hidden, attention_mask, decoder_input_ids,
                                              decoder_attention_mask)
            logits, states = self._reference_states(trunk, trunk.hidden)
        if not return_dict:
            return logits
        return Seq2SeqLMOutputWithValue(logits=logits, decoder_hidden_states=states if output_hidden_states else None)
