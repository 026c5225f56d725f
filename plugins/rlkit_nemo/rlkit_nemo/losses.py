"""rlkit-methods' PPO and ILQL losses on Megatron outputs (vocab-parallel logits and Qs).

The math is rlkit-methods' own (``config.method.loss`` for PPO, ``ilql_loss`` for ILQL);
this module only turns a Megatron forward pass into its inputs:

* PPO log-probs come from the vocab-parallel logits without gathering the vocabulary:
  ``log pi(a|s) = -CE(logits, a)`` with Megatron's vocab-parallel cross-entropy, which
  all-reduces the max, the softmax denominator and the target logit over TP ranks.
* ILQL's terms index Q and the logits at the taken action and take CE over the vocabulary;
  the (B, A, V / tp) slices at the action positions are gathered over TP (a differentiable
  all-gather whose backward hands each rank its slice) and passed to ``ilql_loss`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from megatron.core import tensor_parallel


def vocab_parallel_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label]: (B, T, V / tp), (B, T) -> (B, T), identical on every TP rank."""
    # Megatron's cross-entropy subtracts the max in place: give it its own float copy
    return -tensor_parallel.vocab_parallel_cross_entropy(logits.to(torch.float32, copy=True), labels)


@dataclass
class PPOTrainBatch:
    """A PPO rollout batch with its advantages and returns, ready for the schedule."""

    rollouts: Any  # PPORLBatch
    advantages: torch.Tensor  # (B, R), whitened
    returns: torch.Tensor  # (B, R)


def prepare_ppo(method, rollouts) -> PPOTrainBatch:
    """GAE advantages (whitened) and returns, before the forward-backward schedule.

    Call it on every rank at once: the whitening all-reduces over all processes, and since
    every data-parallel shard is replicated equally over the TP x PP ranks, those statistics
    are the data-parallel ones. (Inside the schedule only the last pipeline stage computes
    the loss, so a collective there would hang.)"""
    advantages, returns = method.get_advantages_and_returns(rollouts.values, rollouts.rewards, mask=rollouts.response_mask)
    return PPOTrainBatch(rollouts, advantages, returns)


def ppo_loss(method, output: Any, batch: PPOTrainBatch) -> tuple[torch.Tensor, dict]:
    """PPO: ``output = (logits (B, Q+R, V/tp), values (B, Q+R, 1))`` over [query; response];
    the positions before each response token predict it and value it."""
    logits, values = output
    b = batch.rollouts
    R = b.response_tensors.shape[1]
    logprobs = vocab_parallel_logprobs(logits[:, -R - 1 : -1], b.response_tensors)  # (B, R)
    values = values[:, -R - 1 : -1, 0].float()  # (B, R)
    return method.loss(logprobs, values, b.logprobs, b.values, batch.advantages, batch.returns, b.response_mask)


def ilql_loss(method, output: Any, batch) -> tuple[torch.Tensor, dict]:
    """ILQL on an ``ILQLBatch``: ``output = (logits (B, T, V/tp), (qs, target_qs, vs))`` with
    the heads already at the batch's action and state indices."""
    from rlkit_methods.ilql.losses import batched_index_select
    from rlkit_methods.ilql.losses import ilql_loss as loss

    logits, (qs, target_qs, vs) = output
    gather = tensor_parallel.gather_from_tensor_model_parallel_region  # (..., V / tp) -> (..., V)
    action_logits = gather(batched_index_select(logits, batch.actions_ixs, dim=1).float())  # (B, A, V)
    actions = batch.input_ids[:, 1:].gather(1, batch.actions_ixs)  # (B, A): the token after each state
    return loss(
        action_logits, [gather(q.float()) for q in qs], [gather(q.float()) for q in target_qs], vs.float(),
        actions, batch.rewards.to(vs.dtype), batch.dones,
        gamma=method.gamma, tau=method.tau, cql_scale=method.cql_scale, awac_scale=method.awac_scale, beta=method.beta,
    )


def ppo_inputs(batch: PPOTrainBatch) -> dict[str, Any]:
    """Model inputs of a PPO batch: [query; response] with its mask and positions."""
    batch = batch.rollouts
    return dict(
        input_ids=torch.cat([batch.query_tensors, batch.response_tensors], dim=1),
        attention_mask=batch.attention_mask, position_ids=batch.position_ids, head_kwargs=None,
    )


def ilql_inputs(batch) -> dict[str, Any]:
    """Model inputs of an ILQL batch; the heads read the state and action positions."""
    return dict(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
        head_kwargs=dict(states_ixs=batch.states_ixs, actions_ixs=batch.actions_ixs),
    )


METHODS = {"ppo": (ppo_inputs, ppo_loss), "ilql": (ilql_inputs, ilql_loss)}


def sft_inputs(batch) -> dict[str, Any]:
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], head_kwargs=None)


def sft_loss(logits: torch.Tensor, batch) -> tuple[torch.Tensor, dict]:
    """rlkit-methods' SFT loss (mean next-token CE over output tokens), vocab-parallel:
    L = -sum_t m_t log p(y_{t+1} | x_<=t) / sum_t m_t with m_t = 1[y_{t+1} != IGNORE_INDEX]."""
    from rlkit_methods.sft.store import IGNORE_INDEX

    labels = batch["labels"][:, 1:]  # (B, T-1)
    mask = (labels != IGNORE_INDEX).float()
    logprobs = vocab_parallel_logprobs(logits[:, :-1], labels.clamp(min=0))  # (B, T-1)
    loss = -(logprobs * mask).sum() / mask.sum().clamp(min=1)
    return loss, {"losses/loss": loss.detach()}
