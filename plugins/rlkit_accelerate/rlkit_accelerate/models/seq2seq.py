"""Encoder-decoder (T5-style) models in pieces: the decoder's blocks, final norm and LM head,
found by structure, and the PPO policy over the decoder.

The same machinery as for causal LMs (:mod:`rlkit_accelerate.models.blocks`): the decoder's
blocks are the largest list of same-class modules inside ``get_decoder()``, what runs between
the last block and the LM head is found by tracing one tiny forward pass, and a forward
pre-hook captures the arguments the decoder gives its blocks (causal mask, encoder output and
mask, and T5's relative position biases, which the first block computes and passes on).
T5 multiplies the decoder output by ``d_model ** -0.5`` before a tied LM head; that scale
becomes one more post-block module, so copies of the top (the hydra reference) apply it too.

Sequences: the encoder reads the prompt; the decoder reads ``[start] + response[:-1]``, so
decoder position ``t`` predicts response token ``t`` and holds the state ``V(s_t)`` is read at.
"""

from __future__ import annotations

import copy
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_accelerate.models.adapters import is_peft_model, save_base_model
from rlkit_accelerate.models.blocks import (
    BranchInput,
    DecoderLayout,
    capture_block_input,
    eval_mode,
    find_decoder_blocks,
    run_blocks,
    run_post,
)
from rlkit_accelerate.models.heads import freeze_trunk, hydra_reference, make_head
from rlkit_accelerate.models.loading import load_saved_heads, load_seq2seq_lm, save_heads, substate
from rlkit_accelerate.models.heads import check_unfrozen
from rlkit_accelerate.models.policy import PolicyOutput


class OutputScale(nn.Module):
    """``x * scale``: T5's rescaling of the decoder output before a tied LM head."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden * self.scale


@dataclass
class Seq2SeqLayout(DecoderLayout):
    """A ``DecoderLayout`` of the decoder, plus the encoder and the decoder stack itself."""

    encoder: nn.Module | None = None
    decoder: nn.Module | None = None
    decoder_start_token_id: int = 0

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [B, S, H]

    def decoder_trunk(
        self,
        index: int,
        encoder_hidden: torch.Tensor,
        attention_mask: torch.Tensor | None,
        decoder_input_ids: torch.Tensor,
        decoder_attention_mask: torch.Tensor | None,
    ) -> BranchInput:
        """Run the decoder up to (not including) block ``index``; what enters it, with the
        block arguments by name (so ``run_blocks`` can pass T5's biases on)."""
        target = self.blocks[index] if index < self.num_blocks else self.post[0]
        hidden, args, kwargs = capture_block_input(
            target,
            lambda: self.decoder(
                input_ids=decoder_input_ids,
                attention_mask=decoder_attention_mask,
                encoder_hidden_states=encoder_hidden,
                encoder_attention_mask=attention_mask,
                use_cache=False,
            ),
        )
        if args:
            names = [
                p.name for p in inspect.signature(target.forward).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ][1:]  # after hidden_states
            kwargs = {**dict(zip(names, args)), **kwargs}
        return BranchInput(hidden=hidden, index=index, kwargs=kwargs)

    def decoder_inputs(self, response_ids: torch.Tensor, response_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``[start] + response[:-1]`` and its mask: position t predicts response token t."""
        start = torch.full_like(response_ids[:, :1], self.decoder_start_token_id)  # [B, 1]
        ids = torch.cat([start, response_ids[:, :-1]], dim=1)  # [B, R]
        if response_mask is None:
            response_mask = torch.ones_like(response_ids)
        mask = torch.cat([torch.ones_like(start), response_mask[:, :-1]], dim=1)
        return ids, mask


def _unwrap(model: nn.Module) -> nn.Module:
    return model.get_base_model() if is_peft_model(model) else model


@torch.no_grad()
def find_seq2seq_layout(model: nn.Module) -> Seq2SeqLayout:
    """Locate the decoder's blocks, post-block modules (and T5's output scale) and the LM head,
    and check that running them in pieces reproduces the model's logits exactly."""
    base = _unwrap(model)
    config = base.config
    if not getattr(config, "is_encoder_decoder", False):
        raise ConfigError(
            f"model.model_arch_type: seq2seq needs an encoder-decoder model (e.g. T5), but {config.model_type!r} is "
            "decoder-only; set model.model_arch_type: causal"
        )
    encoder, decoder, lm_head = base.get_encoder(), base.get_decoder(), base.get_output_embeddings()
    if lm_head is None:
        raise RlkitError(f"{type(base).__name__}: no output embeddings (LM head) found")
    blocks_name, blocks = find_decoder_blocks(decoder)
    embeddings = decoder.get_input_embeddings() if hasattr(decoder, "get_input_embeddings") else None
    candidates = [(n, c) for n, c in decoder.named_children() if c is not blocks and c is not embeddings]

    events: list[str] = []
    captured: dict[str, torch.Tensor] = {}
    handles = [c.register_forward_pre_hook(lambda m, a, n=n: events.append(n)) for n, c in candidates]

    def on_last_block(module, args, output):
        events.append("<last block>")
        captured["hidden"] = output[0] if isinstance(output, tuple) else output

    handles.append(blocks[-1].register_forward_hook(on_last_block))
    vocab = base.get_input_embeddings().weight.shape[0]
    ids = torch.arange(min(4, vocab), device=lm_head.weight.device).unsqueeze(0)  # [1, 4]
    try:
        with eval_mode(base):  # no dropout: the checks below compare exactly
            logits = base(input_ids=ids, decoder_input_ids=ids, use_cache=False).logits
            for handle in handles:
                handle.remove()
            after = events[events.index("<last block>") + 1 :] if "<last block>" in events else []
            by_name = dict(candidates)
            post_names = list(dict.fromkeys(after))
            post: list[nn.Module] = [by_name[n] for n in post_names]
            if not post:
                raise RlkitError(f"{type(base).__name__}: no final norm found after the decoder's blocks")
            if not torch.equal(lm_head(run_post(post, captured["hidden"])), logits):
                post.append(OutputScale(config.d_model**-0.5))  # T5 with a tied head
                post_names.append("<output scale>")
                if not torch.equal(lm_head(run_post(post, captured["hidden"])), logits):
                    raise RlkitError(f"{type(base).__name__}: logits are not lm_head(final norm(last decoder block))")
    finally:
        for handle in handles:
            handle.remove()
    start = config.decoder_start_token_id
    if start is None:
        raise RlkitError(f"{type(base).__name__}: the config has no decoder_start_token_id")
    return Seq2SeqLayout(
        blocks, f"decoder.{blocks_name}", post, post_names, lm_head,
        encoder=encoder, decoder=decoder, decoder_start_token_id=int(start),
    )


def seq2seq_generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs: Any) -> torch.Tensor:
    """``model.generate`` on the decoder, returned as prompt + new tokens [B, T + n] (the
    decoder start token dropped), the shape the trainers slice responses from."""
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)  # [B, 1 + n]
    return torch.cat([input_ids, out[:, 1:].to(input_ids.device)], dim=1)


class Seq2SeqLMWithValueHead(nn.Module):
    """PPO policy on an encoder-decoder LM: a value head on the decoder's final hidden state
    and a reference over the top ``num_layers_unfrozen`` decoder blocks.

    ``k = num_layers_unfrozen >= 0`` freezes the encoder, the embeddings and every decoder
    block but the top ``k`` (all of them for 0); the hydra reference is a frozen copy of those
    ``k`` blocks, the final norm and the head on top of the shared frozen ones. ``-1``: all
    trains and the reference is a frozen copy of the whole model. With adapters the reference
    is the model with its adapters disabled."""

    heads_file = "value_head.safetensors"

    def __init__(self, base_model: nn.Module, *, num_layers_unfrozen: int = -1, num_value_layers_unfrozen: int = 0,
                 with_reference: bool = True):
        super().__init__()
        layout = find_seq2seq_layout(base_model)
        num_blocks = layout.num_blocks
        check_unfrozen("num_layers_unfrozen", num_layers_unfrozen, num_blocks, allow_all=True)
        if num_value_layers_unfrozen:
            raise ConfigError(
                "method.num_value_layers_unfrozen: a value branch is not supported for model.model_arch_type: seq2seq; "
                "use 0 (the value head reads the decoder's final hidden state)"
            )
        self.base_model = base_model
        self.layout = layout  # plain attribute: references base_model's own modules
        self.uses_adapters = is_peft_model(base_model)
        if self.uses_adapters:
            num_layers_unfrozen = -1  # peft froze all but the adapters
        self.num_layers_unfrozen = num_layers_unfrozen
        self.branch_index = 0 if num_layers_unfrozen < 0 else num_blocks - num_layers_unfrozen
        if self.uses_adapters or (not with_reference and num_layers_unfrozen < 0):
            self.reference = None  # adapters: the model with them disabled; else no KL reference
        elif num_layers_unfrozen < 0:
            self.reference = copy.deepcopy(base_model).requires_grad_(False).eval()
        else:
            self.reference = hydra_reference(layout, num_layers_unfrozen)
            freeze_trunk(base_model, layout, num_layers_unfrozen)
        weight = layout.lm_head.weight
        self.v_head = make_head(layout.hidden_size, 1, weight.dtype).to(weight.device)

    @classmethod
    def from_pretrained(cls, model_path: Any, load_kwargs: dict[str, Any] | None = None, **options: Any) -> "Seq2SeqLMWithValueHead":
        policy = cls(load_seq2seq_lm(model_path, **(load_kwargs or {})), **options)
        load_saved_heads(model_path, policy._heads(), cls.heads_file)
        return policy

    def train(self, mode: bool = True) -> "Seq2SeqLMWithValueHead":
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()  # a fixed target: never dropout
        return self

    # --- forward passes (the interface CausalLMWithValueHead shares) ------------------------

    def forward_trunk(self, input_ids, attention_mask, response_ids, response_mask) -> BranchInput:
        """The decoder's input to block ``branch_index`` and the block arguments (encoder
        output and mask, T5's position biases). Frozen for ``num_layers_unfrozen >= 0`` (the
        encoder too), so it can be computed once and reused; for ``-1`` train through ``forward``."""
        encoder_hidden = self.layout.encode(input_ids, attention_mask)  # [B, S, H]
        decoder_ids, decoder_mask = self.layout.decoder_inputs(response_ids, response_mask)
        return self.layout.decoder_trunk(self.branch_index, encoder_hidden, attention_mask, decoder_ids, decoder_mask)

    def forward_top(self, trunk: BranchInput, return_hidden: bool = False) -> PolicyOutput:
        """Trainable top and heads on a trunk output: logits [B, R, V] and values [B, R]."""
        if trunk.index != self.branch_index:
            raise ValueError(f"trunk cut at block {trunk.index}; this policy branches at {self.branch_index}")
        hidden = run_blocks(self.layout.blocks[trunk.index :], trunk.hidden, trunk)  # [B, R, H]
        final = run_post(self.layout.post, hidden)  # [B, R, H]
        return PolicyOutput(logits=self.layout.lm_head(final), values=self.v_head(final).squeeze(-1),
                            hidden_states=final if return_hidden else None)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        response_ids: torch.Tensor | None = None,
        response_mask: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """Logits [B, R, V] predicting each response token and values [B, R] of the states
        before them, for prompts ``input_ids`` (encoder) and ``response_ids`` (decoder)."""
        return self.forward_top(self.forward_trunk(input_ids, attention_mask, response_ids, response_mask))

    @torch.no_grad()
    def forward_reference(self, input_ids, attention_mask, response_ids, response_mask, trunk: BranchInput | None = None) -> torch.Tensor:
        """The initial policy's logits [B, R, V] over the response positions."""
        if self.uses_adapters or self.num_layers_unfrozen < 0:
            decoder_ids, decoder_mask = self.layout.decoder_inputs(response_ids, response_mask)
            inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_ids,
                          decoder_attention_mask=decoder_mask, use_cache=False)
            if self.reference is not None:
                return self.reference(**inputs).logits
            with eval_mode(self.base_model), self.base_model.disable_adapter():
                return self.base_model(**inputs).logits
        if trunk is None:
            trunk = self.forward_trunk(input_ids, attention_mask, response_ids, response_mask)
        return self.reference(trunk.hidden, trunk)

    @torch.no_grad()
    def score_rollout(self, input_ids, attention_mask, response_ids, response_mask,
                      policy: bool = True) -> tuple[PolicyOutput, torch.Tensor]:
        """Policy logits and values and reference logits over the response positions
        (``policy`` is the causal policy's hint; the seq2seq policy always runs its top)."""
        trunk = self.forward_trunk(input_ids, attention_mask, response_ids, response_mask)
        out = self.forward_top(trunk)
        return out, self.forward_reference(input_ids, attention_mask, response_ids, response_mask, trunk=trunk)

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        """Sample with the decoder; prompt + new tokens [B, T + n]."""
        return seq2seq_generate(self.base_model, input_ids, attention_mask, **kwargs)

    # --- saving ---------------------------------------------------------------------------

    def _heads(self) -> dict[str, nn.Module | None]:
        return {"v_head": self.v_head}

    def save_pretrained(self, save_directory: str | os.PathLike, merge_adapters: bool = False,
                        state_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """An HF folder plain ``AutoModelForSeq2SeqLM.from_pretrained`` loads (or the adapter,
        or with ``merge_adapters`` one merged model), plus ``value_head.safetensors``."""
        save_base_model(self.base_model, save_directory, merge_adapters, substate(state_dict, "base_model"), **kwargs)
        save_heads(self._heads(), Path(save_directory) / self.heads_file, state_dict)
