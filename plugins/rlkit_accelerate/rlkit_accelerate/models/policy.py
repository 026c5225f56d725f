"""The PPO policy: a causal LM with a value head, a value branch and a reference model.

Layout for ``L`` blocks, ``k = num_layers_unfrozen``, ``nv = num_value_layers_unfrozen``::

    trunk (frozen when k >= 0)    blocks[:b]             b = L - max(k or L if k == -1, nv)
    policy top                    blocks[b:] -> final norm -> LM head      -> logits
    value                         final hidden -> v_head                    (nv == 0)
                                  copy(blocks[L-nv:]) -> copy(norm) -> v_head (nv > 0)
    reference, k >= 0 (hydra)     blocks[b:L-k] (frozen, shared) -> copy(blocks[L-k:])
                                  -> copy(norm) -> copy(head)
    reference, k == -1            a frozen deep copy of the whole model

``value_head=False`` leaves the value head out (GRPO/RLOO: the engine's ``lm`` heads with a
reference); ``with_reference=False`` the reference. ``score_head=True`` makes the value head a
reward model's: one bias-free linear map (HF's ``score``), exported as a sequence classifier.

Every copy is taken at construction, so at step 0 the reference computes exactly the policy's
logits (trlX's ``-1`` reloaded weights from ``model_path``, which differed for a config).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlkit_core.errors import ConfigError
from rlkit_accelerate.models.blocks import (
    BranchInput,
    eval_mode,
    find_layout,
    position_ids_from_mask,
    run_blocks,
    run_post,
    run_trunk,
)
from rlkit_accelerate.models.adapters import is_peft_model, save_base_model
from rlkit_accelerate.models.heads import Branch, check_unfrozen, freeze_trunk, hydra_reference, make_head
from rlkit_accelerate.models.loading import load_causal_lm, load_saved_heads, save_heads, substate
from rlkit_accelerate.models.shared_prompts import (
    generate_sharing_prompts,
    one_path,
    plain_causal_lm,
    prompt_groups,
    response_logits_sharing_prompts,
)


@dataclass
class PolicyOutput:
    logits: torch.Tensor | None  # [B, T, V]; None when score_rollout skipped the policy, and for a reward model
    values: torch.Tensor | None  # [B, T]; None without a value head
    hidden_states: torch.Tensor | None = None  # [B, T, H], the LM head's input
    trunk_hidden: torch.Tensor | None = None  # [B, T, H], what enters block branch_index (score_rollout)


class CausalLMWithValueHead(nn.Module):
    """PPO policy. Call it (``forward``) for training so DDP sees the pass; call
    ``forward_trunk`` once per batch and pass ``trunk=`` to share it between the policy and
    ``forward_reference``."""

    heads_file = "value_head.safetensors"

    def __init__(
        self, base_model: nn.Module, *, num_layers_unfrozen: int = -1, num_value_layers_unfrozen: int = 0,
        with_reference: bool = True, value_head: bool = True, score_head: bool = False,
    ):
        super().__init__()
        layout = find_layout(base_model)
        num_blocks = layout.num_blocks
        check_unfrozen("num_layers_unfrozen", num_layers_unfrozen, num_blocks, allow_all=True)
        check_unfrozen("num_value_layers_unfrozen", num_value_layers_unfrozen, num_blocks, allow_all=False)
        self.base_model = base_model
        self.layout = layout  # plain attribute: references base_model's own modules
        self.num_layers_unfrozen = num_layers_unfrozen
        self.num_value_layers_unfrozen = num_value_layers_unfrozen
        trainable_top = num_blocks if num_layers_unfrozen < 0 else num_layers_unfrozen
        self.branch_index = num_blocks - max(trainable_top, num_value_layers_unfrozen)

        self.uses_adapters = is_peft_model(base_model)
        if self.uses_adapters:
            # the reference is the model with its adapters disabled; peft froze the rest
            self.reference = None
            self.num_layers_unfrozen = num_layers_unfrozen = -1
            self.branch_index = 0
        elif not with_reference:  # a value-head model without a KL reference (trlX's plain class)
            self.reference = None
        elif num_layers_unfrozen < 0:
            self.reference = copy.deepcopy(base_model).requires_grad_(False).eval()
        else:
            self.reference = hydra_reference(layout, num_layers_unfrozen)
        if not self.uses_adapters:
            freeze_trunk(base_model, layout, num_layers_unfrozen)
        self.value_branch = None
        if num_value_layers_unfrozen:
            self.value_branch = Branch(layout, num_value_layers_unfrozen, None, frozen=False)
        weight = layout.lm_head.weight
        self.score_head = score_head
        if score_head:
            if self.uses_adapters or num_value_layers_unfrozen:
                raise ConfigError("a reward model's score head reads the LM's last hidden state; "
                                  "use it without model.peft_config and without a value branch")
            from rlkit_methods.engine_kit import make_score_head

            self.v_head = make_score_head(layout.hidden_size, weight.dtype, weight.device)
        else:
            self.v_head = make_head(layout.hidden_size, 1, weight.dtype).to(weight.device) if value_head else None

    @classmethod
    def from_pretrained(
        cls, model_path: Any, load_kwargs: dict[str, Any] | None = None, **options: Any
    ) -> "CausalLMWithValueHead":
        """``load_causal_lm(model_path, **load_kwargs)`` wrapped with ``options``
        (``num_layers_unfrozen``, ...), with the heads saved in that folder if there are any."""
        policy = cls(load_causal_lm(model_path, **(load_kwargs or {})), **options)
        load_saved_heads(model_path, policy._heads(), cls.heads_file)
        return policy

    def train(self, mode: bool = True) -> "CausalLMWithValueHead":
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()  # a fixed target: never dropout
        return self

    # --- forward passes -------------------------------------------------------------------

    def forward_trunk(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> BranchInput:
        """Hidden state entering block ``branch_index`` (and the block arguments). Frozen for
        ``num_layers_unfrozen >= 0``, so it can be computed once (outside DDP's forward too)
        and reused; for ``-1`` it holds trainable embeddings, so train through ``forward``."""
        if position_ids is None and attention_mask is not None:
            position_ids = position_ids_from_mask(attention_mask)
        index = self.branch_index
        return run_trunk(self.base_model, self.layout, index, input_ids, attention_mask, position_ids)

    def caches_trunk(self) -> bool:
        """Whether the rollout's trunk output can stand in for the trunk in every PPO epoch:
        the blocks below the branch are frozen and nothing in the model drops out, so they give
        the same hidden states each time (with dropout, training runs them differently)."""
        if self.uses_adapters or self.branch_index == 0:
            return False
        config = getattr(self.base_model, "config", None)
        rates = [getattr(config, name, 0.0) or 0.0 for name in ("attention_dropout", "hidden_dropout", "dropout")]
        dropout = any(isinstance(m, nn.Dropout) and m.p > 0 for m in self.base_model.modules())
        return not dropout and not any(isinstance(r, float) and r > 0 for r in rates)

    def cached_trunk(self, trunk_hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     position_ids: torch.Tensor | None = None) -> BranchInput:
        """A trunk output from kept hidden states; only the block arguments are recomputed
        (embedding up to the first block, not the blocks themselves)."""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        start = run_trunk(self.base_model, self.layout, 0, input_ids, attention_mask, position_ids)
        return BranchInput(hidden=trunk_hidden.to(start.hidden.dtype), index=self.branch_index, args=start.args, kwargs=start.kwargs)

    def forward_top(self, trunk: BranchInput, return_hidden: bool = False, keep: int | torch.Tensor | None = None) -> PolicyOutput:
        """Trainable top and heads on a trunk output: logits and values (of the last ``keep``
        positions only when given: the LM head is most of a top's cost, and the response
        forwards read only the positions that predict the response, as TRL's ``logits_to_keep``)."""
        if trunk.index != self.branch_index:
            raise ValueError(f"trunk cut at block {trunk.index}; this policy branches at {self.branch_index}")
        blocks = self.layout.blocks
        value_index = self.layout.num_blocks - self.num_value_layers_unfrozen
        hidden = run_blocks(blocks[trunk.index : value_index], trunk.hidden, trunk)  # [B, T, H]
        value_input = hidden
        hidden = run_blocks(blocks[value_index:], hidden, trunk)
        final = _last(run_post(self.layout.post, hidden), keep)  # [B, K, H]
        # a reward model reads its score head alone: no LM head over the vocabulary
        logits = None if self.score_head else self.layout.lm_head(final)  # [B, K, V]
        if self.value_branch is not None:
            value_hidden = _last(self.value_branch(value_input, trunk), keep)
        else:
            value_hidden = final  # trlX: the value head shares the policy's final hidden state
        values = self.v_head(value_hidden).squeeze(-1) if self.v_head is not None else None  # [B, K]
        return PolicyOutput(logits=logits, values=values, hidden_states=final if return_hidden else None)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        trunk: BranchInput | None = None,
        return_hidden: bool = False,
        response_ids: torch.Tensor | None = None,
        response_mask: torch.Tensor | None = None,
        trunk_hidden: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """Logits and values. ``position_ids`` default to following the real tokens.

        With ``response_ids`` (the interface the seq2seq policy shares), ``input_ids`` are the
        left-padded prompts and the outputs cover the response only: logits [B, R, V]
        predicting each response token and values [B, R] of the states before them;
        ``trunk_hidden`` (see ``caches_trunk``) replaces running the frozen trunk. Without
        them, a mask ``keep`` [B, T] limits the heads to its positions (packed rows: packing.py)."""
        if response_ids is not None:
            groups = None if return_hidden or trunk_hidden is not None else self._groups_to_share(input_ids, attention_mask, response_mask)
            if groups is not None:
                shared = response_logits_sharing_prompts(self.base_model, input_ids, attention_mask, response_ids, response_mask, groups)
                if shared is not None:
                    return PolicyOutput(logits=shared, values=None)
            input_ids, attention_mask = _join(input_ids, attention_mask, response_ids, response_mask)
            if trunk_hidden is not None:
                trunk = self.cached_trunk(trunk_hidden, input_ids, attention_mask)
            else:
                trunk = self.forward_trunk(input_ids, attention_mask)
            R = response_ids.shape[1]
            return _response_part(self.forward_top(trunk, return_hidden=return_hidden, keep=R + 1), R)
        if trunk is None and trunk_hidden is not None:
            trunk = self.cached_trunk(trunk_hidden, input_ids, attention_mask, position_ids)
        if trunk is None:
            trunk = self.forward_trunk(input_ids, attention_mask, position_ids)
        return self.forward_top(trunk, return_hidden=return_hidden, keep=keep)

    @torch.no_grad()
    def score_rollout(self, input_ids, attention_mask, response_ids, response_mask,
                      policy: bool = True) -> tuple[PolicyOutput | None, torch.Tensor | None]:
        """Policy logits and values and reference logits over the response positions, with
        the frozen trunk run once for both (no reference logits for a model without one).
        ``policy=False`` skips the policy's top (the output then holds only ``trunk_hidden``)."""
        shared = self._score_sharing_prompts(input_ids, attention_mask, response_ids, response_mask, policy)
        if shared is not None:
            return shared
        joined_ids, joined_mask = _join(input_ids, attention_mask, response_ids, response_mask)
        position_ids = position_ids_from_mask(joined_mask)
        trunk = self.sampled_trunk(joined_ids, joined_mask)
        if trunk is None:
            trunk = self.forward_trunk(joined_ids, joined_mask, position_ids)
        R = response_ids.shape[1]
        out = _response_part(self.forward_top(trunk, keep=R + 1), R) if policy else PolicyOutput(logits=None, values=None)
        out.trunk_hidden = trunk.hidden
        if self.reference is None and not self.uses_adapters:
            return out, None
        reference = self.forward_reference(joined_ids, joined_mask, position_ids, trunk=trunk, keep=R + 1)
        return out, reference[:, -R - 1 : -1]

    def shares_prompts(self) -> bool:
        """Whether the response passes may run each distinct prompt once (shared_prompts.py):
        every block trainable, logits only (no value head to read every position), the LM and
        its reference (a separate copy) plain causal HF models."""
        return (self.branch_index == 0 and self.v_head is None and self.value_branch is None
                and not self.uses_adapters and plain_causal_lm(self.base_model))

    def _groups_to_share(self, query, query_mask, response_mask):
        """The prompt groups a response pass may share, None if it runs every row."""
        if query_mask is None or response_mask is None or not self.shares_prompts():
            return None
        return prompt_groups(query, query_mask)

    def _score_sharing_prompts(self, query, query_mask, response, response_mask, policy: bool):
        """score_rollout's outputs with each distinct prompt run once; None where not shared."""
        groups = self._groups_to_share(query, query_mask, response_mask)
        if groups is None:
            return None
        models = {"reference": self.reference, "policy": self.base_model if policy else None}
        logits = {}
        for name, lm in models.items():
            if lm is not None:
                logits[name] = response_logits_sharing_prompts(lm, query, query_mask, response, response_mask, groups)
                if logits[name] is None:
                    return None
        return PolicyOutput(logits=logits.get("policy"), values=None), logits.get("reference")

    @torch.no_grad()
    def forward_reference(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        trunk: BranchInput | None = None,
        keep: int | None = None,
    ) -> torch.Tensor:
        """The initial policy's logits [B, T, V] (trlX's ``forward_hydra``), of the last
        ``keep`` positions when given (as ``forward_top``). With a hydra reference, pass the
        ``trunk`` the policy used to avoid running it twice; the separate reference of
        ``num_layers_unfrozen = -1`` always needs ``input_ids``."""
        if position_ids is None and attention_mask is not None:
            position_ids = position_ids_from_mask(attention_mask)
        if self.uses_adapters:
            # a fixed target: never dropout
            with eval_mode(self.base_model), self.base_model.disable_adapter():
                logits = self.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False).logits
                return _last(logits, keep)
        if self.num_layers_unfrozen < 0:
            if input_ids is None:
                raise ValueError("num_layers_unfrozen=-1: the reference is a separate model; pass input_ids")
            # HF's logits_to_keep: the head on the last ``keep`` positions, as forward_top's
            extra = {"logits_to_keep": keep} if keep else {}
            out = self.reference(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **extra
            )
            return out.logits
        if trunk is None:
            trunk = self.forward_trunk(input_ids, attention_mask, position_ids)
        # frozen policy blocks between the trunk cut and the hydra branch equal the reference's
        split = self.layout.num_blocks - self.num_layers_unfrozen
        hidden = run_blocks(self.layout.blocks[trunk.index : split], trunk.hidden, trunk)
        return self.reference(hidden, trunk, keep=keep)

    def generate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The policy's top is the base model's own top, so sampling is the base model's.

        When the trunk can be cached (``caches_trunk``), what enters block ``branch_index`` at
        every position sampling feeds (the prompts, then each new token but the last) is kept,
        so that ``score_rollout`` on these samples needs no second trunk pass (``sampled_trunk``)."""
        self._sampled = None
        if args or "input_ids" not in kwargs:
            return self.base_model.generate(*args, **kwargs)
        if not self.caches_trunk() or not one_path(self.base_model, kwargs):
            return generate_sharing_prompts(self.base_model, **kwargs)  # beams reorder rows between steps: nothing kept
        steps: list[torch.Tensor] = []

        def keep(module, block_args, block_kwargs):
            steps.append((block_args[0] if block_args else block_kwargs["hidden_states"]).detach())

        handle = self.layout.blocks[self.branch_index].register_forward_pre_hook(keep, with_kwargs=True)
        try:
            out = generate_sharing_prompts(self.base_model, **kwargs)
        finally:
            handle.remove()
        mask = kwargs.get("attention_mask")
        if steps and steps[0].shape[0] != out.shape[0] and mask is not None:
            groups = prompt_groups(kwargs["input_ids"], mask)  # the prefill ran on the distinct prompts
            if groups is not None and steps[0].shape[0] == groups.first.shape[0]:
                steps[0] = steps[0][groups.group]
        kept = sum(s.shape[1] for s in steps)  # one forward per fed position: the prompt, then N - 1 tokens
        if steps and all(s.shape[0] == out.shape[0] for s in steps) and kept == out.shape[1] - 1:
            self._sampled = (out, mask if mask is not None else torch.ones_like(kwargs["input_ids"]), torch.cat(steps, dim=1))
        return out

    def sampled_trunk(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> BranchInput | None:
        """The trunk of the last ``generate``'s samples (one use), if ``input_ids`` are those
        samples: the same prompts (same left padding) and responses cut from what was sampled.
        The position after the last fed token (never fed: sampling stops there) gets zeros,
        which causal attention shows to no other position. None otherwise."""
        sampled, self._sampled = getattr(self, "_sampled", None), None
        if sampled is None:
            return None
        out, prompt_mask, hidden = sampled  # (B, Q + N), (B, Q), (B, Q + N - 1, H)
        Q, T = prompt_mask.shape[1], input_ids.shape[1]
        if input_ids.shape[0] != out.shape[0] or not Q <= T <= out.shape[1] or hidden.shape[1] < T - 1:
            return None
        real = attention_mask.bool()
        same = torch.equal(attention_mask[:, :Q], prompt_mask.to(attention_mask.dtype)) and torch.equal(
            input_ids[real], out[:, :T].to(input_ids.device)[real])
        if not same:
            return None
        hidden = hidden[:, :T]
        if hidden.shape[1] < T:
            hidden = torch.cat([hidden, hidden.new_zeros(hidden.shape[0], T - hidden.shape[1], hidden.shape[2])], dim=1)
        return self.cached_trunk(hidden, input_ids, attention_mask)

    # --- saving ---------------------------------------------------------------------------

    def _heads(self) -> dict[str, nn.Module | None]:
        return {"v_head": self.v_head, "value_branch": self.value_branch}

    def save_pretrained(self, save_directory: str | os.PathLike, merge_adapters: bool = False,
                        state_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """An HF folder plain ``AutoModelForCausalLM.from_pretrained`` loads (with adapters: the
        adapter, which peft loads on the base model, or with ``merge_adapters`` one merged
        model), plus ``value_head.safetensors`` for ``from_pretrained`` of this class. A reward
        model (``score_head``) is one ``AutoModelForSequenceClassification`` folder instead."""
        if self.score_head:
            from rlkit_methods.engine_kit import save_sequence_classifier

            score = substate(state_dict, "v_head") or self.v_head.state_dict()
            save_sequence_classifier(self.base_model, score["weight"], save_directory, substate(state_dict, "base_model"))
            return
        save_base_model(self.base_model, save_directory, merge_adapters, substate(state_dict, "base_model"), **kwargs)
        if any(head is not None for head in self._heads().values()):
            save_heads(self._heads(), Path(save_directory) / self.heads_file, state_dict)


def _join(query, query_mask, response, response_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """[left-padded prompt, right-padded response] and its attention mask."""
    if query_mask is None:
        query_mask = torch.ones_like(query)
    if response_mask is None:
        response_mask = torch.ones_like(response)
    return torch.cat([query, response], dim=1), torch.cat([query_mask, response_mask], dim=1)


def _last(x: torch.Tensor, keep: int | torch.Tensor | None) -> torch.Tensor:
    """The last ``keep`` positions of [B, T, ...], or [M, ...] where the mask ``keep`` [B, T]
    is True (packed rows), or all of them for None."""
    if keep is None:
        return x
    return x[keep] if isinstance(keep, torch.Tensor) else x[:, -keep:]


def _response_part(out: PolicyOutput, R: int) -> PolicyOutput:
    """Outputs at the positions that predict the last ``R`` tokens (position t predicts t + 1)."""
    hidden = out.hidden_states[:, -R - 1 : -1] if out.hidden_states is not None else None
    values = out.values[:, -R - 1 : -1] if out.values is not None else None
    logits = out.logits[:, -R - 1 : -1] if out.logits is not None else None
    return PolicyOutput(logits=logits, values=values, hidden_states=hidden)
