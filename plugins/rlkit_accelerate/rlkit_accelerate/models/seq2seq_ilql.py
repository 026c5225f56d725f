"""ILQL on an encoder-decoder LM: V, Q and target-Q heads on the decoder's hidden states and
Q-guided decoding with the encoder output computed once (the seq2seq form of
:class:`~rlkit_accelerate.models.ilql_heads.CausalLMWithILQLHeads`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlkit_accelerate.models.adapters import is_peft_model, save_base_model
from rlkit_accelerate.models.blocks import capture_head_input
from rlkit_accelerate.models.cache_name import CACHE_FIELD, output_cache
from rlkit_accelerate.models.heads import freeze_trunk
from rlkit_accelerate.models.ilql_heads import ILQLHeads, ILQLOutput, q_guided_step, stop_tokens
from rlkit_accelerate.models.loading import load_saved_heads, load_seq2seq_lm, save_heads, substate
from rlkit_accelerate.models.heads import check_unfrozen
from rlkit_accelerate.models.seq2seq import find_seq2seq_layout


def last_prompt_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
    """[B] the last real prompt token that is not in ``skip`` (the EOS a T5 tokenizer appends):
    the token ``logit_mask`` conditions the first decoded token on."""
    keep = attention_mask.bool() & ~torch.isin(input_ids, skip)  # [B, T]
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    last = torch.where(keep, positions, -1).amax(dim=1).clamp(min=0)  # [B]
    return input_ids.gather(1, last.unsqueeze(1)).squeeze(1)


class Seq2SeqLMWithILQLHeads(nn.Module):
    """An encoder-decoder LM with ILQL heads on the decoder. ``num_layers_unfrozen >= 0``
    freezes the encoder, the embeddings and all decoder blocks but the top ``k``."""

    heads_file = "ilql_heads.safetensors"

    def __init__(self, base_model: nn.Module, *, two_qs: bool = True, alpha: float = 0.99, num_layers_unfrozen: int = -1):
        super().__init__()
        self.layout = find_seq2seq_layout(base_model)
        check_unfrozen("num_layers_unfrozen", num_layers_unfrozen, self.layout.num_blocks, allow_all=True)
        self.base_model = base_model
        if not is_peft_model(base_model):  # peft froze everything but the adapters
            freeze_trunk(base_model, self.layout, num_layers_unfrozen)
        weight = self.layout.lm_head.weight
        heads = ILQLHeads(self.layout.hidden_size, weight.shape[0], two_qs, alpha, weight.dtype)
        self.ilql_heads = heads.to(weight.device)

    @classmethod
    def from_pretrained(cls, model_path: Any, load_kwargs: dict[str, Any] | None = None, **options: Any) -> "Seq2SeqLMWithILQLHeads":
        model = cls(load_seq2seq_lm(model_path, **(load_kwargs or {})), **options)
        load_saved_heads(model_path, {"ilql_heads": model.ilql_heads}, cls.heads_file)
        return model

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        states_ixs: torch.Tensor | None = None,
        actions_ixs: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        use_cache: bool = False,
    ) -> ILQLOutput:
        """Logits over the decoder positions [B, T, V]; Q at ``actions_ixs`` and V at
        ``states_ixs`` (decoder positions)."""
        with capture_head_input(self.layout.lm_head) as captured:
            out = self.base_model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask,
                encoder_outputs=encoder_outputs,
                **{CACHE_FIELD: past_key_values},
                use_cache=use_cache,
            )
        qs, target_qs, vs = self.ilql_heads(captured["hidden"], states_ixs, actions_ixs)
        return ILQLOutput(out.logits, qs, target_qs, vs, output_cache(out) if use_cache else None)

    def _decode_forward(self, attention_mask, decoder_input_ids, encoder_outputs, past_key_values) -> ILQLOutput:
        """One decoding step on the cache: the decoder's logits and heads over ``decoder_input_ids``."""
        with capture_head_input(self.layout.lm_head) as captured:
            out = self.base_model(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                                  encoder_outputs=encoder_outputs, **{CACHE_FIELD: past_key_values}, use_cache=True)
        qs, target_qs, vs = self.ilql_heads(captured["hidden"], None, None)
        return ILQLOutput(out.logits, qs, target_qs, vs, output_cache(out))

    def sync_target_q_heads(self, alpha: float | None = None) -> None:
        self.ilql_heads.sync_target_q_heads(alpha)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        beta: float = 1.0,
        top_k: int = 20,
        temperature: float = 1.0,
        max_new_tokens: int = 32,
        logit_mask: torch.Tensor | None = None,
        eos_token_id: int | list[int] | None = None,
        pad_token_id: int | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        min_new_tokens: int = 0,
        behaviour_top_k: int = 0,
    ) -> torch.Tensor:
        """Decode with pi ~ softmax(top_k(log pi_beta + beta * (min Q_target - V)) / temperature).

        The encoder runs once; the decoder starts from its start token and keeps a KV cache.
        ``logit_mask[i, j]`` True forbids token j right after token i; the first token follows
        the last prompt token (not the EOS the tokenizer appended). Each row stops at its EOS
        (later positions hold ``pad_token_id``). ``decoder_input_ids`` [B, D] (trlX's
        argument, starting with the start token) continue a given decoder prefix instead of
        starting from the start token alone. ``min_new_tokens``: no EOS before that many new
        tokens; ``behaviour_top_k`` k > 0: only pi_beta's k most likely tokens can be sampled.
        Returns prompt + new tokens [B, T + n].
        """
        eos_ids, pad_token_id = stop_tokens(self.layout.decoder.config, eos_token_id, pad_token_id, input_ids.device)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if logit_mask is not None:
            logit_mask = torch.as_tensor(logit_mask, dtype=torch.bool, device=input_ids.device)  # [V, V]
        encoder_outputs = (self.layout.encode(input_ids, attention_mask),)
        B = input_ids.shape[0]
        if decoder_input_ids is None:
            step_ids = torch.full((B, 1), self.layout.decoder_start_token_id, dtype=torch.long, device=input_ids.device)
        else:
            step_ids = decoder_input_ids.to(input_ids.device)  # [B, D]
        last_tokens = last_prompt_tokens(input_ids, attention_mask, eos_ids)  # [B]
        if step_ids.shape[1] > 1:
            last_tokens = step_ids[:, -1]  # the prefix's last token precedes the first new one
        new_tokens, cache = [], None
        finished = torch.zeros(B, dtype=torch.bool, device=input_ids.device)  # [B]
        for step in range(max_new_tokens):
            out = self._decode_forward(attention_mask, step_ids, encoder_outputs, cache)
            cache = out.past_key_values  # rlkit's ILQLOutput
            next_ids, finished = q_guided_step(out, last_tokens, finished, eos_ids, pad_token_id, step < min_new_tokens,
                                               beta=beta, top_k=top_k, temperature=temperature, logit_mask=logit_mask,
                                               behaviour_top_k=behaviour_top_k)
            new_tokens.append(next_ids)
            if finished.all():
                break
            step_ids, last_tokens = next_ids, next_ids.squeeze(-1)
        return torch.cat([input_ids, *new_tokens], dim=1)

    def save_pretrained(self, save_directory: str | os.PathLike, merge_adapters: bool = False,
                        state_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """An HF folder plain ``AutoModelForSeq2SeqLM`` loads (or the adapter; with
        ``merge_adapters`` one merged model), plus ``ilql_heads.safetensors``."""
        save_base_model(self.base_model, save_directory, merge_adapters, substate(state_dict, "base_model"), **kwargs)
        save_heads({"ilql_heads": self.ilql_heads}, Path(save_directory) / self.heads_file, state_dict)
