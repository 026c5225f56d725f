"""ILQL: a causal LM with V, Q and target-Q heads, and Q-guided generation (Snell et al. 2022,
https://arxiv.org/abs/2206.11871; trlX's ``AutoModelForCausalLMWithILQLHeads``).

The heads read the LM head's input (the final hidden state). The math (the Q-guided sampling
step, the Polyak update) is ``rlkit_methods.ilql.sampling``'s; this module wires it to a model.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rlkit_methods.engine_kit import batched_index_select, q_guided_logits, sync_target

from rlkit_accelerate.models.blocks import capture_head_input, find_layout, position_ids_from_mask
from rlkit_accelerate.models.cache_name import CACHE_FIELD, output_cache
from rlkit_accelerate.models.adapters import is_peft_model, save_base_model
from rlkit_accelerate.models.heads import freeze_trunk, make_head
from rlkit_accelerate.models.loading import load_causal_lm, load_saved_heads, save_heads, substate
from rlkit_accelerate.models.heads import check_unfrozen
from rlkit_accelerate.sharding import local_shard


class ILQLHeads(nn.Module):
    """V head, one or two Q heads and their frozen, Polyak-averaged targets."""

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        two_qs: bool = True,
        alpha: float = 0.99,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.two_qs = two_qs
        self.alpha = alpha
        self.v_head = make_head(hidden_size, 1, dtype)
        num_qs = 2 if two_qs else 1
        self.q_heads = nn.ModuleList(make_head(hidden_size, vocab_size, dtype) for _ in range(num_qs))
        self.target_q_heads = copy.deepcopy(self.q_heads).requires_grad_(False)

    def forward(
        self,
        hidden: torch.Tensor,
        states_ixs: torch.Tensor | None = None,
        actions_ixs: torch.Tensor | None = None,
    ) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], torch.Tensor]:
        """hidden: [B, T, H]; optional index tensors [B, S] / [B, A] select states and actions.
        Returns qs (each [B, A, V]), target_qs (each [B, A, V]) and vs [B, S, 1]."""
        states = hidden if states_ixs is None else batched_index_select(hidden, states_ixs)
        actions = hidden if actions_ixs is None else batched_index_select(hidden, actions_ixs)
        qs = tuple(head(actions) for head in self.q_heads)
        target_qs = tuple(head(actions) for head in self.target_q_heads)
        return qs, target_qs, self.v_head(states)

    def decode(self, hidden: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """What Q-guided sampling reads at the last position only: target Qs (each [B, 1, V])
        and V [B, 1, 1] from hidden [B, T, H]; the online Q heads, which sampling never
        reads, are not run."""
        last = hidden[:, -1:]  # [B, 1, H]
        return tuple(head(last) for head in self.target_q_heads), self.v_head(last)

    def sync_target_q_heads(self, alpha: float | None = None) -> None:
        """target <- alpha * q + (1 - alpha) * target (trlX: alpha weighs the online heads)."""
        alpha = self.alpha if alpha is None else alpha
        sync_target(map(local_shard, self.target_q_heads.parameters()), map(local_shard, self.q_heads.parameters()), alpha)


@dataclass
class ILQLOutput:
    logits: torch.Tensor  # [B, T, V]
    qs: tuple[torch.Tensor, ...]  # each [B, A, V]
    target_qs: tuple[torch.Tensor, ...]  # each [B, A, V]
    vs: torch.Tensor  # [B, S, 1]
    past_key_values: Any = None


def stop_tokens(config: Any, eos_token_id: int | list[int] | None, pad_token_id: int | None, device) -> tuple[torch.Tensor, int | None]:
    """(EOS ids [E], pad id) for a Q-guided decoding loop: the arguments, else the model
    config's; without a pad token, rows that ended are filled with EOS."""
    eos = config.eos_token_id if eos_token_id is None else eos_token_id
    eos_ids = torch.tensor([eos] if isinstance(eos, int) else list(eos or []), device=device)
    pad_token_id = config.pad_token_id if pad_token_id is None else pad_token_id
    if pad_token_id is None and len(eos_ids):
        pad_token_id = int(eos_ids[0])
    return eos_ids, pad_token_id


def q_guided_step(
    out: ILQLOutput, last_tokens: torch.Tensor, finished: torch.Tensor, eos_ids: torch.Tensor, pad_token_id: int | None,
    forbid_eos: bool = False, **sampling: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample the next tokens [B, 1] from the last position of ``out`` (``sampling``: beta,
    top_k, temperature, logit_mask, behaviour_top_k); rows already ``finished`` [B] get ``pad_token_id``;
    ``forbid_eos``: no EOS this step (``min_new_tokens``). Returns the tokens and the updated
    ``finished``."""
    target_q = torch.stack([q[:, -1] for q in out.target_qs]).amin(dim=0)  # [B, V], pessimistic
    logits = out.logits[:, -1]
    if forbid_eos and len(eos_ids):
        logits = logits.index_fill(-1, eos_ids, float("-inf"))
    scores = q_guided_logits(logits, target_q.float(), out.vs[:, -1].float(), last_tokens=last_tokens, **sampling)
    next_ids = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1)  # [B, 1]
    if pad_token_id is not None:
        next_ids = next_ids.masked_fill(finished.unsqueeze(-1), pad_token_id)
    if len(eos_ids):
        finished = finished | torch.isin(next_ids.squeeze(-1), eos_ids)
    return next_ids, finished


class CausalLMWithILQLHeads(nn.Module):
    """A causal LM with ILQL heads. ``num_layers_unfrozen`` freezes the bottom as for PPO."""

    heads_file = "ilql_heads.safetensors"

    def __init__(
        self, base_model: nn.Module, *, two_qs: bool = True, alpha: float = 0.99, num_layers_unfrozen: int = -1,
        q_heads: str = "mlp",
    ):
        super().__init__()
        self.layout = find_layout(base_model)
        check_unfrozen("num_layers_unfrozen", num_layers_unfrozen, self.layout.num_blocks, allow_all=True)
        self.base_model = base_model
        if not is_peft_model(base_model):  # peft froze everything but the adapters
            freeze_trunk(base_model, self.layout, num_layers_unfrozen)
        from rlkit_accelerate.models.ilql_small_heads import make_ilql_heads  # it subclasses ILQLHeads

        # q_heads: "mlp" (trlX's) or "embedding" (read out through the LM's own output embedding)
        self.ilql_heads = make_ilql_heads(q_heads, self.layout.hidden_size, self.layout.lm_head, two_qs, alpha)

    @classmethod
    def from_pretrained(
        cls, model_path: Any, load_kwargs: dict[str, Any] | None = None, **options: Any
    ) -> "CausalLMWithILQLHeads":
        """``load_causal_lm(model_path, **load_kwargs)`` wrapped with ``options`` (``two_qs``,
        ``alpha``, ``num_layers_unfrozen``), with the heads saved in that folder if any."""
        model = cls(load_causal_lm(model_path, **(load_kwargs or {})), **options)
        load_saved_heads(model_path, {"ilql_heads": model.ilql_heads}, cls.heads_file)
        return model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        states_ixs: torch.Tensor | None = None,
        actions_ixs: torch.Tensor | None = None,
        use_cache: bool = False,
        flat_ixs: bool = False,
    ) -> ILQLOutput:
        """``flat_ixs``: ``states_ixs`` and ``actions_ixs`` (1, I) index the flattened positions
        of all rows (packed rows: packing.py) rather than each row's own."""
        if position_ids is None and attention_mask is not None and past_key_values is None:
            position_ids = position_ids_from_mask(attention_mask)
        with capture_head_input(self.layout.lm_head) as captured:
            out = self.base_model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                **{CACHE_FIELD: past_key_values},
                use_cache=use_cache,
            )
        hidden = captured["hidden"]  # [B, T, H]
        if flat_ixs:
            hidden = hidden.reshape(1, -1, hidden.shape[-1])  # [1, B T, H]
        qs, target_qs, vs = self.ilql_heads(hidden, states_ixs, actions_ixs)
        return ILQLOutput(out.logits, qs, target_qs, vs, output_cache(out) if use_cache else None)

    def _decode_forward(self, input_ids, attention_mask, position_ids, past_key_values) -> ILQLOutput:
        """One decoding step: the LM logits, target Qs and V at the last position only."""
        with capture_head_input(self.layout.lm_head) as captured:
            out = self.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  **{CACHE_FIELD: past_key_values}, use_cache=True)
        target_qs, vs = self.ilql_heads.decode(captured["hidden"])
        return ILQLOutput(out.logits[:, -1:], (), target_qs, vs, output_cache(out))

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
        min_new_tokens: int = 0,
        behaviour_top_k: int = 0,
    ) -> torch.Tensor:
        """Sample with pi ~ softmax(top_k(log pi_beta + beta * (min Q_target - V)) / temperature).

        ``logit_mask[i, j]`` True forbids token j right after token i. Each sequence stops at
        its EOS; later positions hold ``pad_token_id``; ``min_new_tokens`` (transformers'
        meaning): no EOS before that many new tokens. ``behaviour_top_k`` k > 0: only pi_beta's
        k most likely tokens can be sampled (the top-k of log pi_beta before the guidance is
        added; :func:`~rlkit_methods.ilql.sampling.q_guided_logits`). Returns prompt + new
        tokens [B, T + n].
        """
        eos_ids, pad_token_id = stop_tokens(self.base_model.config, eos_token_id, pad_token_id, input_ids.device)
        if logit_mask is not None:
            logit_mask = torch.as_tensor(logit_mask, dtype=torch.bool, device=input_ids.device)  # [V, V]
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        position_ids = position_ids_from_mask(attention_mask)  # [B, T]
        samples, step_ids, cache = input_ids, input_ids, None
        finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # [B]
        for step in range(max_new_tokens):
            out = self._decode_forward(step_ids, attention_mask, position_ids, cache)
            cache = out.past_key_values  # rlkit's ILQLOutput
            next_ids, finished = q_guided_step(out, samples[:, -1], finished, eos_ids, pad_token_id, step < min_new_tokens,
                                               beta=beta, top_k=top_k, temperature=temperature, logit_mask=logit_mask,
                                               behaviour_top_k=behaviour_top_k)
            samples = torch.cat([samples, next_ids], dim=1)
            if finished.all():
                break
            step_ids = next_ids
            attention_mask = torch.cat([attention_mask, torch.ones_like(next_ids)], dim=1)
            position_ids = position_ids[:, -1:] + 1  # [B, 1]
        return samples

    def save_pretrained(self, save_directory: str | os.PathLike, merge_adapters: bool = False,
                        state_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """An HF folder plain ``AutoModelForCausalLM`` loads (or, with adapters, peft loads on
        the base model; ``merge_adapters`` merges them), plus ``ilql_heads.safetensors``."""
        save_base_model(self.base_model, save_directory, merge_adapters, substate(state_dict, "base_model"), **kwargs)
        save_heads({"ilql_heads": self.ilql_heads}, Path(save_directory) / self.heads_file, state_dict)
