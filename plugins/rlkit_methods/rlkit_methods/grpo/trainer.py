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
import os
import time
from typing import Any

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError, RlkitError

from rlkit_methods.data.padding import pad
from rlkit_methods.grpo.losses import group_advantages, group_std, grpo_loss, rloo_advantages, rloo_kl_rewards, rloo_loss
from rlkit_methods.grpo.rewards import WeightedRewards, function_name, reward_functions, score_each
from rlkit_methods.grpo.store import GroupElement, GroupRolloutStorage
from rlkit_methods.loop.batching import pass_batches
from rlkit_methods.loop.evaluation import on_main
from rlkit_methods.loop.trainer import RLTrainer
from rlkit_methods.ppo.trainer import NOT_METADATA, PPOTrainer


class GRPOTrainer(RLTrainer):
    method_name = "grpo"
    forward_kind = "response"
    shard_store = False  # each rank trains on its own rollouts
    cache_trunk = True  # keep the frozen trunk's output from the rollout forward when it runs
    kl_in_loss = True  # GRPO's KL to the reference is a loss term (RLOO's is in the reward)
    response_length = PPOTrainer.response_length  # EOS or a stop sequence ends a response

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
        experience = method.gen_experience_kwargs or method.gen_kwargs
        self.experience_kwargs = self.generation_kwargs(**{k: (v[0] if isinstance(v, list) else v) for k, v in experience.items()})
        self.prompt_pipeline = None
        self.prompt_position = (0, 0)  # (pass over the prompts, next chunk)
        self.tokens_per_sequence = None  # loss tokens per sample over the last phase, every rank (dapo)

    def model_spec(self) -> ModelSpec:
        # no reference at all when beta == 0: nothing is built, nothing runs
        return ModelSpec("lm", reference=self.config.method.beta > 0, num_layers_unfrozen=self.config.model.num_layers_unfrozen)

    def add_prompt_pipeline(self, pipeline) -> None:
        self.prompt_pipeline = pipeline

    # --- rollouts ----------------------------------------------------------------------------

    def next_prompt_chunk(self) -> list[int]:
        """The next ``chunk_size / num_generations`` prompts of this rank; a new shuffled pass when one ends."""
        method, engine = self.config.method, self.engine
        pass_index, chunk = self.prompt_position
        while True:
            chunks = pass_batches(len(self.prompt_pipeline), method.chunk_size // method.num_generations, seed=self.config.train.seed,
                                  pass_index=pass_index, rank=engine.process_index, world_size=engine.num_processes)
            if chunk < len(chunks):
                break
            pass_index, chunk = pass_index + 1, 0
        self.prompt_position = (pass_index, chunk + 1)
        return chunks[chunk]

    def needs_old_logprobs(self, num_rollouts: int) -> bool:
        """pi_old differs from the policy being trained once a phase takes more than one step."""
        return self.config.method.num_iterations > 1 or math.ceil(num_rollouts / self.engine.batch_sizes()[0]) > 1

    def finished(self, output: list[int], length: int) -> bool:
        """Whether a response ended by itself (EOS or a stop sequence) rather than at max_new_tokens."""
        if self.tokenizer.eos_token_id in output[:length]:
            return True
        text = self.tokenizer.decode(output[:length], skip_special_tokens=True) if self.stop_sequences else ""
        return any(s in text for s in self.stop_sequences)

    def sample_chunk(self, want: tuple[str, ...] | None, timer: dict, tokens: dict) -> dict[str, list]:
        """Sample one chunk of groups; with ``want`` (not None) run the engine's forward on it."""
        G, pipeline = self.config.method.num_generations, self.prompt_pipeline
        batch = pipeline.collate([pipeline[i] for i in self.next_prompt_chunk() for _ in range(G)])
        start = time.time()
        samples = self.generate(batch["input_ids"], batch["attention_mask"], **self.experience_kwargs)
        timer["generate"] += time.time() - start
        width = batch["input_ids"].shape[1]
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
        raw = [row[width:].tolist() for row in samples]
        lengths = [self.response_length(o) for o in raw]
        outputs = [o[:n] for o, n in zip(raw, lengths)]
        tokens["generate"] += sum(lengths)
        metadata = {k: v for k, v in batch.items() if k not in NOT_METADATA}
        part = {"prompts": prompts, "outputs": outputs, "truncated": [not self.finished(o, n) for o, n in zip(raw, lengths)],
                "metadata": [dict(zip(metadata, v)) for v in zip(*metadata.values())] or [{}] * len(prompts)}
        if want is None:
            return part
        start = time.time()
        query = pad([torch.tensor(p) for p in prompts], self.tokenizer.pad_token_id, "left")  # (B, Q)
        response = pad([torch.tensor(o) for o in outputs], self.tokenizer.pad_token_id, "right")  # (B, R)
        q_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompts], 0, "left")
        r_mask = pad([torch.ones(len(o), dtype=torch.long) for o in outputs], 0, "right")
        out = self.engine.forward("response", {"query_tensors": query, "response_tensors": response,
                                               "attention_mask": torch.cat([q_mask, r_mask], dim=1)}, want=want)
        if "logprobs" in out:  # an engine may leave them out when want says "no_logprobs"
            part["logprobs"] = [out["logprobs"][i, :n] for i, n in enumerate(lengths)]
        if "ref_logprobs" in out:
            part["ref_logprobs"] = [out["ref_logprobs"][i, :n] for i, n in enumerate(lengths)]
        part["trunk"] = out.get("trunk") or [None] * len(lengths)
        tokens["forward"] += int(q_mask.sum() + r_mask.sum())
        timer["forward"] += time.time() - start
        return part

    def score(self, rows: dict[str, list]) -> torch.Tensor:
        """(N, F) rewards of this rank's samples: every rank's scored once on the main process."""
        engine = self.engine
        str_samples, str_prompts, str_outputs = self.decode(rows["prompts"], [p + o for p, o in zip(rows["prompts"], rows["outputs"])])
        everything = engine.gather_object(list(zip(str_samples, str_prompts, str_outputs, rows["metadata"])))

        def score() -> list:
            flat = [row for part in everything for row in part]
            extra = {k: [row[3][k] for row in flat] for k in (flat[0][3] if flat else {})}
            table = score_each(self.reward_fns, self.iter_count, [r[0] for r in flat], [r[1] for r in flat],
                               [r[2] for r in flat], extra, self.tokenizer)
            bounds = [0]
            for part in everything:
                bounds.append(bounds[-1] + len(part))
            return [table[a:b] for a, b in zip(bounds, bounds[1:])]

        return torch.tensor(on_main(engine, score)[engine.process_index], dtype=torch.float32).view(len(str_samples), -1)

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
        if not self.reward_fns:
            raise ConfigError(f"reward: {type(self).__name__} needs a reward function (train(reward_fn=...) or reward: in the config)")
        if self.prompt_pipeline is None:
            raise RlkitError(f"{type(self).__name__} has no prompts: call add_prompt_pipeline (train() does) before make_experience")
        num_rollouts = num_rollouts or method.num_rollouts
        if num_rollouts % method.num_generations:
            raise ConfigError(f"method.num_rollouts: {num_rollouts} is not a multiple of num_generations={method.num_generations}")
        if self.progress_bar is not None:
            self.progress_bar.show_phase("rollout")
        keep_old = self.needs_old_logprobs(num_rollouts)
        # pi_old is the policy being trained unless kept: then the forward is for the reference (and trunk) alone
        want = tuple(w for w, on in (("ref_logprobs", method.beta > 0), ("trunk", self.cache_trunk),
                                     ("no_logprobs", not keep_old)) if on)
        run_forward = method.beta > 0 or keep_old
        timer = {"generate": 0.0, "score": 0.0, "forward": 0.0}
        tokens = {"generate": 0, "forward": 0}
        rows: dict[str, list] = {}
        while len(rows.get("outputs", [])) < num_rollouts:
            for key, values in self.sample_chunk(want if run_forward else None, timer, tokens).items():
                rows.setdefault(key, []).extend(values)
        rows = {k: v[:num_rollouts] for k, v in rows.items()}

        start = time.time()
        per_function = self.score(rows)  # (N, F)
        timer["score"] += time.time() - start
        rewards = per_function @ torch.tensor(self.reward_weights)  # (N,)
        advantages, stats = self.advantages(rewards, rows)
        elements = []
        for i in range(num_rollouts):
            elements.append(GroupElement(
                query_tensor=torch.tensor(rows["prompts"][i]), response_tensor=torch.tensor(rows["outputs"][i]),
                advantage=advantages[i], truncated=rows["truncated"][i],
                old_logprobs=rows["logprobs"][i] if keep_old else None,
                ref_logprobs=rows["ref_logprobs"][i] if "ref_logprobs" in rows and self.kl_in_loss else None,
                trunk=rows["trunk"][i] if "trunk" in rows else None,
            ))
        self.store.push(elements)
        logging_dir = self.config.train.rollout_logging_dir
        if logging_dir and self.is_main_process:  # the main process's rollouts of each phase
            os.makedirs(logging_dir, exist_ok=True)
            self.store.export_history(logging_dir)
        counted = [0 if (t and method.mask_truncated_completions) else len(o) for o, t in zip(rows["outputs"], rows["truncated"])]
        total = self.engine.all_reduce_sum(torch.tensor([float(sum(counted)), float(num_rollouts)], dtype=torch.float64))
        self.tokens_per_sequence = (total[0] / total[1].clamp(min=1)).item()
        stats.update(self.rollout_stats(rewards, per_function, rows, timer, tokens))
        self.metrics_log.write(self.iter_count, "rollout", stats)
        self.hooks.rlkit_rollouts_made(trainer=self, step=self.iter_count, num_rollouts=len(self.store), stats=stats,
                                       is_main_process=self.is_main_process)

    def rollout_stats(self, rewards, per_function, rows, timer, tokens) -> dict[str, float]:
        stats = {"rollout_scores/mean": rewards.mean().item(),
                 "rollout_scores/std": rewards.std().item() if rewards.numel() > 1 else 0.0}
        for k, fn in enumerate(self.reward_fns):
            stats[f"rollout_scores/{function_name(fn)}/mean"] = per_function[:, k].mean().item()
        lengths = [len(o) for o in rows["outputs"]]
        stats["completions/mean_length"] = sum(lengths) / len(lengths)
        stats["completions/clipped_ratio"] = sum(rows["truncated"]) / len(lengths)
        for phase, seconds in timer.items():
            stats[f"time/rollout_{phase}"] = seconds
        stats["tokens_per_second/generate"] = tokens["generate"] / max(timer["generate"], 1e-9)
        if tokens["forward"]:
            stats["tokens_per_second/forward"] = tokens["forward"] / max(timer["forward"], 1e-9)
        return stats

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
                         tokens_per_sequence=self.tokens_per_sequence, bias_correction_kl=method.use_bias_correction_kl)

    def post_epoch_callback(self) -> None:
        self.store.clear_history()
        self.make_experience(self.config.method.num_rollouts, self.iter_count)

    # --- checkpoint state --------------------------------------------------------------------

    def method_state(self) -> dict[str, Any]:
        return {"prompt_position": list(self.prompt_position), "tokens_per_sequence": self.tokens_per_sequence,
                "store": list(self.store.history)}

    def load_method_state(self, state: dict[str, Any]) -> None:
        self.prompt_position = tuple(state["prompt_position"])
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
                         epsilon=method.epsilon, epsilon_high=method.epsilon_high)
