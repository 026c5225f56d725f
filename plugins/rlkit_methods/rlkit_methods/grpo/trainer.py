"""``GRPOTrainer`` and ``RLOOTrainer``: critic-free policy optimisation on any engine.

A rollout phase (``make_experience``) takes whole prompts from this rank's share, samples
each ``num_generations`` times in calls of ``chunk_size`` rows (a group never spans ranks or
calls), keeps the sampled ids up to EOS or a stop sequence, and scores every rank's samples
with each reward function once on the main process. The engine's no-grad ``response``
forward runs only when something needs it: the reference's log-probs (``beta > 0``), or
pi_old because a phase takes more than one optimizer step (``num_iterations > 1`` or more
rollouts than ``train.batch_size``; otherwise pi_old is the policy itself, detached, as in
TRL). With ``beta == 0`` the engine builds no reference at all.

Advantages are group-relative (GRPO) or leave-one-out (RLOO, the KL to the reference in
the reward) over the phase; the loop then trains ``num_iterations`` passes over the phase's
rollouts with the clipped-ratio losses of :mod:`rlkit_methods.grpo.losses`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError, RlkitError

from rlkit_methods.common.scoring import ScoreRow, scorer_arguments
from rlkit_methods.data.padding import pad
from rlkit_methods.grpo.losses import group_advantages, group_std, grpo_loss, rloo_advantages, rloo_kl_rewards, rloo_loss
from rlkit_methods.grpo.rewards import WeightedRewards, function_name, reward_functions, score_each
from rlkit_methods.grpo.store import GroupElement, GroupRolloutStorage
from rlkit_methods.online import LogprobGap, OnlineTrainer, PhaseTimer, Responses


class GRPOTrainer(OnlineTrainer):
    method_name = "grpo"
    forward_kind = "response"
    cache_trunk = True  # keep the frozen trunk's output from the rollout forward when it runs
    kl_in_loss = True  # GRPO's KL to the reference is a loss term (RLOO's is in the reward)
    # rollouts of an older policy (train.async_rollouts): the ratio is taken against the policy
    # that sampled them, or against the trainer's pi_old with the truncated importance weight
    on_policy_only = None

    def __init__(self, config, reward_fn=None, **kwargs):
        method = config.method
        self.reward_fns, self.reward_weights = reward_functions(reward_fn, method.reward_weights)
        combined = reward_fn if callable(reward_fn) and self.reward_weights == [1.0] else None
        if self.reward_fns and combined is None:  # evaluation's reward: the same weighted sum
            combined = WeightedRewards(self.reward_fns, self.reward_weights)
        super().__init__(config, reward_fn=combined, **kwargs)
        if self.engine.is_seq2seq:
            raise ConfigError(f"model.model_arch_type: {type(self).__name__} trains causal LMs (as TRL's); use causal")
        self.store = GroupRolloutStorage(self.tokenizer.pad_token_id, method.mask_truncated_completions)
        self.experience_kwargs = self.rollout_generation_kwargs()
        self.tokens_per_sequence = None  # loss tokens per sample over the last phase, every rank (dapo)

    def model_spec(self) -> ModelSpec:
        # no reference at all when beta == 0: nothing is built, nothing runs
        return ModelSpec("lm", reference=self.config.method.beta > 0, num_layers_unfrozen=self.config.model.num_layers_unfrozen)

    # --- rollouts ----------------------------------------------------------------------------

    def needs_old_logprobs(self, num_rollouts: int) -> bool:
        """pi_old differs from the policy being trained once a phase takes more than one step."""
        return self.config.method.num_iterations > 1 or math.ceil(num_rollouts / self.engine.batch_sizes()[0]) > 1

    def rollout_chunk(self) -> dict[str, Any]:
        G = self.config.method.num_generations
        return self.next_prompt_chunk(self.config.method.chunk_size // G, repeat=G)

    def sample_chunk(self, samples: Responses, want: tuple[str, ...] | None, timer: PhaseTimer, gap: LogprobGap) -> dict[str, list]:
        """One sampled chunk of groups; with ``want`` (not None) run the engine's forward on it."""
        part = {"prompts": samples.prompts, "outputs": samples.outputs, "truncated": samples.truncated,
                "metadata": samples.metadata, "versions": samples.versions}
        sampler = self.sampler_logprobs(samples)
        if sampler is not None:
            part["sampler_logprobs"] = [lp.float() for lp in sampler]
        if want is None:
            return part
        out = self.forward_samples(samples, want, timer)
        lengths = [len(o) for o in samples.outputs]
        if "logprobs" in out:  # an engine may leave them out when want says "no_logprobs"
            gap.add(samples, out["logprobs"])
            part["logprobs"] = [out["logprobs"][i, :n] for i, n in enumerate(lengths)]
        if "ref_logprobs" in out:
            part["ref_logprobs"] = [out["ref_logprobs"][i, :n] for i, n in enumerate(lengths)]
        part["trunk"] = out.get("trunk") or [None] * len(lengths)
        return part

    def reward_table(self, rows: list[ScoreRow]) -> list[list[float]]:
        """(N, F): every reward function on every rank's rows (on the main process)."""
        return score_each(self.reward_fns, self.iter_count, *scorer_arguments(rows), self.tokenizer)

    def advantages(self, rewards: torch.Tensor, rows: dict[str, list]) -> tuple[torch.Tensor, dict[str, float]]:
        """GRPO: group-relative advantages of the weighted reward."""
        method = self.config.method
        advantages = group_advantages(rewards, method.num_generations, method.scale_rewards, all_reduce=self.engine.all_reduce_sum)
        zero_std = torch.isclose(group_std(rewards, method.num_generations), torch.zeros(()))
        return advantages, {"rollout_scores/frac_zero_std": zero_std.float().mean().item()}

    @torch.no_grad()
    def make_experience(self, num_rollouts: int | None = None, iter_count: int = 0, verbose: bool = False) -> None:
        """Collect ``num_rollouts`` samples (whole groups) on this rank into ``self.store``."""
        method = self.config.method
        self.check_ready()
        num_rollouts = num_rollouts or method.num_rollouts
        if num_rollouts % method.num_generations:
            raise ConfigError(f"method.num_rollouts: {num_rollouts} is not a multiple of num_generations={method.num_generations}")
        if self.progress_bar is not None:
            self.progress_bar.show_phase("rollout")
        # pi_old: the policy being trained (ratio 1) unless a phase takes several steps, the
        # importance weight needs the trainer's (forward), or the rollouts were sampled ahead
        # (without the weight: the policy that sampled them, the generator's log-probs)
        from_sampler = self.ahead is not None and not self.importance_sampling
        keep_old = self.needs_old_logprobs(num_rollouts) or self.importance_sampling or self.ahead is not None
        trainer_logprobs = self.importance_sampling or self.needs_old_logprobs(num_rollouts)
        # without them the forward is for the reference (and trunk) alone
        want = tuple(w for w, on in (("ref_logprobs", method.beta > 0), ("trunk", self.cache_trunk),
                                     ("no_logprobs", not trainer_logprobs)) if on)
        run_forward = method.beta > 0 or trainer_logprobs
        timer, gap = PhaseTimer(), LogprobGap()
        rows: dict[str, list] = {}
        for samples in self.phase_samples(num_rollouts, timer):
            for key, values in self.sample_chunk(samples, want if run_forward else None, timer, gap).items():
                rows.setdefault(key, []).extend(values)
        rows = {k: v[:num_rollouts] for k, v in rows.items()}
        old_logprobs = rows["sampler_logprobs"] if from_sampler else rows.get("logprobs")

        with timer.time("score"):
            samples = Responses(rows["prompts"], rows["outputs"], rows["truncated"], rows["metadata"])
            per_function = torch.tensor(self.score_samples(samples, self.reward_table), dtype=torch.float32)
            per_function = per_function.view(num_rollouts, -1)  # (N, F)
        rewards = per_function @ torch.tensor(self.reward_weights)  # (N,)
        advantages, stats = self.advantages(rewards, rows)
        elements = []
        for i in range(num_rollouts):
            elements.append(GroupElement(
                query_tensor=torch.tensor(rows["prompts"][i]), response_tensor=torch.tensor(rows["outputs"][i]),
                advantage=advantages[i], truncated=rows["truncated"][i],
                old_logprobs=old_logprobs[i] if keep_old else None,
                ref_logprobs=rows["ref_logprobs"][i] if "ref_logprobs" in rows and self.kl_in_loss else None,
                trunk=rows["trunk"][i] if "trunk" in rows else None,
                sampler_logprobs=rows["sampler_logprobs"][i] if self.importance_sampling else None,
                version=rows["versions"][i],
            ))
        self.store.push(elements)
        counted = [0 if (t and method.mask_truncated_completions) else len(o) for o, t in zip(rows["outputs"], rows["truncated"])]
        total = self.engine.all_reduce_sum(torch.tensor([float(sum(counted)), float(num_rollouts)], dtype=torch.float64))
        self.tokens_per_sequence = (total[0] / total[1].clamp(min=1)).item()
        stats.update(self.score_stats(rewards))
        for k, fn in enumerate(self.reward_fns):
            stats[f"rollout_scores/{function_name(fn)}/mean"] = per_function[:, k].mean().item()
        lengths = [len(o) for o in rows["outputs"]]
        stats["completions/mean_length"] = sum(lengths) / len(lengths)
        stats["completions/clipped_ratio"] = sum(rows["truncated"]) / len(lengths)
        stats.update(gap.stats(self.engine))
        self.finish_phase(stats, timer)

    # --- learning ----------------------------------------------------------------------------

    def prepare_learning(self) -> None:
        if len(self.store) == 0:
            raise RlkitError(f"{type(self).__name__} has no rollouts: call make_experience before learn (train() does)")
        self.n_inner_epochs = self.config.method.num_iterations
        self.total_steps = min(self.config.train.total_steps, self.config.train.epochs * self.n_inner_epochs * self.steps_per_pass())

    def old_logprobs(self, outputs, batch) -> torch.Tensor:
        """pi_old: the rollout's log-probs when kept, else the policy's own, detached (ratio 1)."""
        return batch.old_logprobs if batch.old_logprobs is not None else outputs["logprobs"].detach()

    def loss(self, outputs, batch):
        method = self.config.method
        return grpo_loss(outputs["logprobs"], self.old_logprobs(outputs, batch), batch.ref_logprobs, batch.advantages,
                         batch.response_mask, beta=method.beta, epsilon=method.epsilon, epsilon_high=method.epsilon_high,
                         loss_type=method.loss_type, max_completion_length=method.max_completion_length,
                         tokens_per_sequence=self.tokens_per_sequence, bias_correction_kl=method.use_bias_correction_kl,
                         sampler_logprobs=batch.sampler_logprobs,
                         importance_sampling_cap=method.vllm_importance_sampling_clip_max)

    def post_epoch_callback(self) -> None:
        self.store.clear_history()
        self.make_experience(self.config.method.num_rollouts, self.iter_count)

    # --- checkpoint state --------------------------------------------------------------------

    def method_state(self) -> dict[str, Any]:
        return {"prompt_position": list(self.prompt_position), "tokens_per_sequence": self.tokens_per_sequence,
                "store": list(self.store.history), **self.rollout_state()}

    def load_method_state(self, state: dict[str, Any]) -> None:
        self.prompt_position = tuple(state["prompt_position"])
        self.load_rollout_state(state)
        self.tokens_per_sequence = state["tokens_per_sequence"]
        self.store.clear_history()
        self.store.push([GroupElement(**e) if isinstance(e, dict) else e for e in state["store"]])


class RLOOTrainer(GRPOTrainer):
    """TRL 1.16's RLOO: r_i - beta * sum_t (log pi_old - log pi_ref) as the reward, a
    leave-one-out baseline, and the clipped ratio of the whole sample's probability."""

    method_name = "rloo"
    kl_in_loss = False

    def needs_old_logprobs(self, num_rollouts: int) -> bool:
        # the KL penalty reads pi_old at rollout time whenever beta > 0
        return self.config.method.beta > 0 or super().needs_old_logprobs(num_rollouts)

    def advantages(self, rewards: torch.Tensor, rows: dict[str, list]) -> tuple[torch.Tensor, dict[str, float]]:
        method = self.config.method
        stats: dict[str, float] = {}
        if method.reward_clip_range:
            rewards = rewards.clamp(min=method.reward_clip_range[0], max=method.reward_clip_range[1])
        if method.beta > 0:
            old = pad(rows["logprobs"], 0.0, "right")  # (N, R)
            ref = pad(rows["ref_logprobs"], 0.0, "right")
            mask = pad([torch.ones(len(o)) for o in rows["outputs"]], 0.0, "right")
            if method.mask_truncated_completions:  # TRL masks the truncated samples' KL too
                mask = mask * torch.tensor([0.0 if t else 1.0 for t in rows["truncated"]]).unsqueeze(1)
            rewards, kl = rloo_kl_rewards(rewards, old, ref, mask, method.beta)
            counts = self.engine.all_reduce_sum(torch.tensor([kl.sum().item(), mask.sum().item()], dtype=torch.float64))
            stats["policy/kl"] = (counts[0] / counts[1].clamp(min=1)).item()  # per token, as TRL logs it
        advantages = rloo_advantages(rewards, method.num_generations, method.normalize_advantages,
                                     all_reduce=self.engine.all_reduce_sum)
        zero_std = torch.isclose(group_std(rewards, method.num_generations), torch.zeros(()))
        stats["rollout_scores/frac_zero_std"] = zero_std.float().mean().item()
        return advantages, stats

    def loss(self, outputs, batch):
        method = self.config.method
        return rloo_loss(outputs["logprobs"], self.old_logprobs(outputs, batch), batch.advantages, batch.response_mask,
                         epsilon=method.epsilon, epsilon_high=method.epsilon_high, sampler_logprobs=batch.sampler_logprobs,
                         importance_sampling_cap=method.vllm_importance_sampling_clip_max)
