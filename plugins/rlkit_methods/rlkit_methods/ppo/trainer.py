"""``PPOTrainer``: online PPO against a reward function, on any engine.

A rollout phase (``make_experience``) samples responses for chunks of prompts, scores the
decoded text with the reward function once per sample on the main process, and asks the
engine for the policy's log-probs and values and the reference's log-probs of the *sampled
ids* (never re-tokenized text). Per-token rewards are the KL penalty plus the score on the
last generated token, which is inside the loss mask. Once the phase's rollouts are all in,
their GAE advantages are whitened over every rank's rollouts of the phase and kept in the
store with the returns (so every step, on every engine, trains on the same ones, and no
collective runs inside the engine's step). The KL controller is updated once per rollout
phase. Every phase is timed, with tokens/s (:class:`rlkit_methods.online.OnlineTrainer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError, RlkitError

from rlkit_methods.common.stats import RunningMoments
from rlkit_methods.common.validate import check_token_scores
from rlkit_methods.data.padding import pad
from rlkit_methods.online import LogprobGap, OnlineTrainer, PhaseTimer
from rlkit_methods.ppo.losses import clip_scores, kl_penalty_rewards, phase_advantages_and_returns, ppo_loss, scale_scores
from rlkit_methods.ppo.store import PPORLBatch, PPORLElement, PPORolloutStorage


@dataclass
class PPOTrainBatch:
    """A collated rollout batch with advantages and returns given beside it (for callers that
    compute them on a batch themselves; the trainer's rollouts carry their own)."""

    rollouts: PPORLBatch
    advantages: torch.Tensor  # (B, R)
    returns: torch.Tensor  # (B, R)

    def __getattr__(self, name):  # the engine reads the rollout fields (query_tensors, ...)
        return getattr(self.__dict__["rollouts"], name)


class PPOTrainer(OnlineTrainer):
    method_name = "ppo"
    forward_kind = "response"
    # rollouts of an older policy (train.async_rollouts): the ratio is taken against the policy
    # that sampled them, or against the trainer's pi_old with the truncated importance weight
    on_policy_only = None
    # keep the frozen trunk's output from each rollout for its PPO epochs (when the engine
    # can); False runs the trunk every time
    cache_trunk = True

    def __init__(self, config, reward_fn=None, **kwargs):
        super().__init__(config, reward_fn=reward_fn, **kwargs)
        method = config.method
        if method.num_topk_samples != 1:
            raise ConfigError(f"method.num_topk_samples: best-of-n rollouts are not supported by {type(self).__name__} yet; use 1")
        self.kl_ctl = method.make_kl_controller()
        self.running_moments = RunningMoments()
        self.ref_mean, self.ref_std = method.ref_mean, method.ref_std
        self.mean_kl = 0.0
        # prompts left-padded whatever tokenizer.padding_side says: the policies read the state
        # before the first response token in the prompt's last column, as at rollout time
        self.store = PPORolloutStorage(self.tokenizer.pad_token_id, "left")
        self.experience_kwargs = self.rollout_generation_kwargs()

    def model_spec(self) -> ModelSpec:
        return ModelSpec("value", reference=True, num_layers_unfrozen=self.config.model.num_layers_unfrozen,
                         options={"num_value_layers_unfrozen": self.config.method.num_value_layers_unfrozen})

    @torch.no_grad()
    def make_experience(self, num_rollouts: int = 1024, iter_count: int = 0, verbose: bool = False) -> None:
        """Collect ``num_rollouts`` rollouts on this rank into ``self.store``; once all are in,
        their advantages and returns, whitened over every rank's rollouts of the phase."""
        self.check_ready()
        if self.progress_bar is not None:
            self.progress_bar.show_phase("rollout")
        method = self.config.method
        want = ("ref_logprobs", "trunk") if self.cache_trunk else ("ref_logprobs",)
        timer, gap = PhaseTimer(), LogprobGap()
        elements, all_scores, all_kl = [], [], []
        for samples in self.phase_samples(num_rollouts, timer):
            with timer.time("score"):
                scores = self.score_samples(samples, self.reward_scores)

            check_token_scores(scores, [len(o) for o in samples.outputs])
            with timer.time("forward"):  # scaling counted with the forward, as before
                dense = any(isinstance(s, list) for s in scores)
                score_t = pad([torch.tensor(s if isinstance(s, list) else [s]) for s in scores], 0.0, "right") if dense else torch.tensor(scores)
                score_mask = pad([torch.ones(len(s) if isinstance(s, list) else 1) for s in scores], 0.0, "right") if dense else None
                score_t = clip_scores(score_t.float(), method.cliprange_reward)
                all_scores.append(score_t if not dense else (score_t * score_mask).sum(1))
                score_t = self.scale(score_t, score_mask)

            out = self.forward_samples(samples, want, timer)
            gap.add(samples, out["logprobs"])
            sampler = self.sampler_logprobs(samples)
            # pi_old: the trainer's forward, corrected by the importance weight when it is on; rollouts
            # sampled ahead without it take the ratio against the policy that sampled them
            old_from_sampler = self.ahead is not None and not self.importance_sampling
            with timer.time("forward"):
                lengths = [len(o) for o in samples.outputs]
                r_mask = pad([torch.ones(n, dtype=torch.long) for n in lengths], 0, "right")
                trunks = out.get("trunk") or [None] * len(lengths)
                rewards, kl = kl_penalty_rewards(out["logprobs"], out["ref_logprobs"], r_mask, self.kl_ctl.value, score_t, score_mask)
                all_kl.append(kl)
                for i, n in enumerate(lengths):
                    elements.append(PPORLElement(
                        query_tensor=torch.tensor(samples.prompts[i]), response_tensor=torch.tensor(samples.outputs[i]),
                        logprobs=sampler[i].float() if old_from_sampler else out["logprobs"][i, :n],
                        values=out["values"][i, :n], rewards=rewards[i, :n], trunk=trunks[i],
                        sampler_logprobs=sampler[i].float() if self.importance_sampling else None,
                        version=samples.versions[i],
                    ))
        elements = elements[:num_rollouts]
        self.set_advantages(elements)
        self.store.push(elements)
        kl = torch.cat(all_kl)
        total = self.engine.all_reduce_sum(torch.tensor([kl.sum().item(), float(kl.numel())], dtype=torch.float64))
        self.mean_kl = (total[0] / total[1].clamp(min=1)).item()
        stats = {**self.score_stats(torch.cat(all_scores)), "policy/sqrt_kl": max(self.mean_kl, 0.0) ** 0.5,
                 "kl_ctl_value": float(self.kl_ctl.value), **gap.stats(self.engine)}
        self.finish_phase(stats, timer)

    def set_advantages(self, elements: list[PPORLElement]) -> None:
        """GAE advantages (whitened over every rank's rollouts of the phase) and returns, set on
        each rollout: once per phase, so every step and every engine trains on the same ones."""
        method = self.config.method
        advantages, returns = phase_advantages_and_returns([e.values for e in elements], [e.rewards for e in elements],
                                                           method.gamma, method.lam, all_reduce=self.engine.all_reduce_sum)
        for e, a, r in zip(elements, advantages, returns):
            e.advantages, e.returns = a, r

    def scale(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        mode = self.config.method.scale_reward
        if mode == "ref" and self.ref_std is None:
            self.ref_mean, self.ref_std = scores.mean().item(), scores.std().item() if scores.numel() > 1 else 1.0
        running_std = None
        if mode == "running":
            self.running_moments.update(scores, mask, all_reduce=self.engine.all_reduce_sum)
            running_std = self.running_moments.std
        return scale_scores(scores, mode, running_std=running_std, ref_std=self.ref_std, mask=mask,
                            all_reduce=self.engine.all_reduce_sum)

    # --- learning ----------------------------------------------------------------------------

    def prepare_learning(self) -> None:
        if len(self.store) == 0:
            raise RlkitError("PPO has no rollouts: call make_experience before learn (train() does)")
        self.n_inner_epochs = self.config.method.ppo_epochs
        self.total_steps = min(self.config.train.total_steps, self.config.train.epochs * self.n_inner_epochs * self.steps_per_pass())

    def loss(self, outputs, batch: PPORLBatch):
        """The PPO loss on a micro-batch of rollouts (advantages and returns from the rollout phase)."""
        if batch.advantages is None:
            raise RlkitError("PPO rollouts have no advantages: make_experience sets them once a phase is complete")
        method = self.config.method
        return ppo_loss(outputs["logprobs"], outputs["values"], batch.logprobs, batch.values, batch.advantages,
                        batch.returns, batch.response_mask, cliprange=method.cliprange,
                        cliprange_value=method.cliprange_value, vf_coef=method.vf_coef,
                        sampler_logprobs=batch.sampler_logprobs,
                        importance_sampling_cap=method.vllm_importance_sampling_clip_max)

    def post_epoch_callback(self) -> None:
        # once per rollout phase, with n_steps = the rollouts of the phase (trlX: per PPO epoch)
        self.kl_ctl.update(self.mean_kl, n_steps=len(self.store) * self.engine.num_processes)
        self.store.clear_history()
        self.make_experience(self.config.method.num_rollouts, self.iter_count)

    # --- checkpoint state --------------------------------------------------------------------

    def method_state(self) -> dict[str, Any]:
        return {
            "kl_ctl": self.kl_ctl.state_dict(),
            "running_moments": self.running_moments.state_dict(),
            "ref": [self.ref_mean, self.ref_std],
            "mean_kl": self.mean_kl,
            "prompt_position": list(self.prompt_position),
            "store": list(self.store.history),
            **self.rollout_state(),
        }

    def load_method_state(self, state: dict[str, Any]) -> None:
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.running_moments.load_state_dict(state["running_moments"])
        self.ref_mean, self.ref_std = state["ref"]
        self.mean_kl = state["mean_kl"]
        self.prompt_position = tuple(state["prompt_position"])
        self.load_rollout_state(state)
        self.store.clear_history()
        elements = [PPORLElement(**e) if isinstance(e, dict) else e for e in state["store"]]
        if any(e.advantages is None for e in elements):  # a checkpoint from before advantages were kept
            self.set_advantages(elements)
        self.store.push(elements)
