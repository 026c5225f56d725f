"""``PPOTrainer``: online PPO against a reward function, on any engine.

A rollout phase (``make_experience``) samples responses for chunks of prompts, scores the
decoded text with the reward function once per sample on the main process, and asks the
engine for the policy's log-probs and values and the reference's log-probs of the *sampled
ids* (never re-tokenized text). Per-token rewards are the KL penalty plus the score on the
last generated token, which is inside the loss mask. The KL controller is updated once per
rollout phase. Every phase is timed, with tokens/s.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError, RlkitError

from rlkit_methods.common.stats import RunningMoments
from rlkit_methods.common.validate import check_scores, check_token_scores
from rlkit_methods.data.padding import pad
from rlkit_methods.loop.batching import pass_batches
from rlkit_methods.loop.evaluation import call_scorer, on_main
from rlkit_methods.loop.trainer import RLTrainer
from rlkit_methods.ppo.losses import clip_scores, kl_penalty_rewards, scale_scores
from rlkit_methods.ppo.store import PPORLBatch, PPORLElement, PPORolloutStorage

NOT_METADATA = ("input_ids", "attention_mask", "position_ids")


@dataclass
class PPOTrainBatch:
    """A collated rollout batch with its GAE advantages (whitened over the ranks) and returns."""

    rollouts: PPORLBatch
    advantages: torch.Tensor  # (B, R)
    returns: torch.Tensor  # (B, R)

    def __getattr__(self, name):  # the engine reads the rollout fields (query_tensors, ...)
        return getattr(self.__dict__["rollouts"], name)


class PPOTrainer(RLTrainer):
    method_name = "ppo"
    forward_kind = "response"
    shard_store = False  # each rank trains on its own rollouts
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
        experience = method.gen_experience_kwargs or method.gen_kwargs
        self.experience_kwargs = self.generation_kwargs(**{k: (v[0] if isinstance(v, list) else v) for k, v in experience.items()})
        self.prompt_pipeline = None
        self.prompt_position = (0, 0)  # (pass over the prompts, next chunk)

    def model_spec(self) -> ModelSpec:
        return ModelSpec("value", reference=True, num_layers_unfrozen=self.config.model.num_layers_unfrozen,
                         options={"num_value_layers_unfrozen": self.config.method.num_value_layers_unfrozen})

    def add_prompt_pipeline(self, pipeline) -> None:
        self.prompt_pipeline = pipeline

    # --- rollouts ----------------------------------------------------------------------------

    def next_prompt_chunk(self) -> dict[str, Any]:
        """The next chunk of prompts for this rank; a new shuffled pass when one ends."""
        engine = self.engine
        pass_index, chunk = self.prompt_position
        while True:
            chunks = pass_batches(len(self.prompt_pipeline), self.config.method.chunk_size, seed=self.config.train.seed,
                                  pass_index=pass_index, rank=engine.process_index, world_size=engine.num_processes)
            if chunk < len(chunks):
                break
            pass_index, chunk = pass_index + 1, 0
        self.prompt_position = (pass_index, chunk + 1)
        return self.prompt_pipeline.collate([self.prompt_pipeline[i] for i in chunks[chunk]])

    def response_length(self, output_ids: list[int]) -> int:
        """Tokens kept from a sampled response: up to and including EOS, or up to the token
        that completes a stop sequence (at least one token)."""
        eos = self.tokenizer.eos_token_id
        length = len(output_ids)
        if eos in output_ids:
            length = output_ids.index(eos) + 1
        if self.stop_sequences:
            for k in range(1, length + 1):
                text = self.tokenizer.decode(output_ids[:k], skip_special_tokens=True)
                if any(s in text for s in self.stop_sequences):
                    return k
        return max(length, 1)

    def score_rollouts(self, str_samples, str_prompts, str_outputs, metadata) -> list:
        """Reward on the main process (once per sample), scores scattered back to each rank."""
        engine = self.engine
        rows = [dict(zip(metadata, v)) for v in zip(*metadata.values())] or [{}] * len(str_samples)
        everything = engine.gather_object(list(zip(str_samples, str_prompts, str_outputs, rows)))

        def score() -> list:
            flat = [row for part in everything for row in part]
            extra = {k: [row[3][k] for row in flat] for k in (flat[0][3] if flat else {})}
            scores = call_scorer(self.reward_fn, "reward", self.iter_count, [r[0] for r in flat], [r[1] for r in flat],
                                 [r[2] for r in flat], extra, self.tokenizer)
            scores = check_scores(scores, len(flat))
            bounds = [0]
            for part in everything:
                bounds.append(bounds[-1] + len(part))
            return [scores[a:b] for a, b in zip(bounds, bounds[1:])]

        return on_main(engine, score)[engine.process_index]

    @torch.no_grad()
    def make_experience(self, num_rollouts: int = 1024, iter_count: int = 0, verbose: bool = False) -> None:
        """Collect ``num_rollouts`` rollouts on this rank into ``self.store``."""
        if self.reward_fn is None:
            raise ConfigError("reward: PPO needs a reward function to make rollouts (train(reward_fn=...) or reward: in the config)")
        if self.prompt_pipeline is None:
            raise RlkitError("PPO has no prompts: call add_prompt_pipeline (train() does) before make_experience")
        if self.progress_bar is not None:
            self.progress_bar.show_phase("rollout")
        method, pad_id = self.config.method, self.tokenizer.pad_token_id
        want = ("ref_logprobs", "trunk") if self.cache_trunk else ("ref_logprobs",)
        timer = {"generate": 0.0, "score": 0.0, "forward": 0.0}
        tokens = {"generate": 0, "forward": 0}
        elements, all_scores, all_kl = [], [], []
        while len(elements) < num_rollouts:
            batch = self.next_prompt_chunk()
            start = time.time()
            samples = self.generate(batch["input_ids"], batch["attention_mask"], **self.experience_kwargs)
            timer["generate"] += time.time() - start
            width = batch["input_ids"].shape[1]
            prompts = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
            outputs = [row[width:].tolist() for row in samples]
            lengths = [self.response_length(o) for o in outputs]
            outputs = [o[:n] for o, n in zip(outputs, lengths)]
            tokens["generate"] += sum(lengths)

            start = time.time()
            metadata = {k: v for k, v in batch.items() if k not in NOT_METADATA}
            str_samples, str_prompts, str_outputs = self.decode(prompts, [p + o for p, o in zip(prompts, outputs)])
            scores = self.score_rollouts(str_samples, str_prompts, str_outputs, metadata)
            check_token_scores(scores, lengths)
            timer["score"] += time.time() - start

            start = time.time()
            dense = any(isinstance(s, list) for s in scores)
            score_t = pad([torch.tensor(s if isinstance(s, list) else [s]) for s in scores], 0.0, "right") if dense else torch.tensor(scores)
            score_mask = pad([torch.ones(len(s) if isinstance(s, list) else 1) for s in scores], 0.0, "right") if dense else None
            score_t = clip_scores(score_t.float(), method.cliprange_reward)
            all_scores.append(score_t if not dense else (score_t * score_mask).sum(1))
            score_t = self.scale(score_t, score_mask)

            query = pad([torch.tensor(p) for p in prompts], pad_id, "left")  # (B, Q)
            response = pad([torch.tensor(o) for o in outputs], pad_id, "right")  # (B, R)
            q_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompts], 0, "left")
            r_mask = pad([torch.ones(len(o), dtype=torch.long) for o in outputs], 0, "right")
            out = self.engine.forward("response", {"query_tensors": query, "response_tensors": response,
                                                   "attention_mask": torch.cat([q_mask, r_mask], dim=1)}, want=want)
            trunks = out.get("trunk") or [None] * len(lengths)
            rewards, kl = kl_penalty_rewards(out["logprobs"], out["ref_logprobs"], r_mask, self.kl_ctl.value, score_t, score_mask)
            all_kl.append(kl)
            tokens["forward"] += int(q_mask.sum() + r_mask.sum())
            timer["forward"] += time.time() - start
            for i, n in enumerate(lengths):
                elements.append(PPORLElement(
                    query_tensor=torch.tensor(prompts[i]), response_tensor=torch.tensor(outputs[i]),
                    logprobs=out["logprobs"][i, :n], values=out["values"][i, :n], rewards=rewards[i, :n], trunk=trunks[i],
                ))
        self.store.push(elements[:num_rollouts])
        logging_dir = self.config.train.rollout_logging_dir
        if logging_dir and self.is_main_process:  # the main process's rollouts of each phase
            os.makedirs(logging_dir, exist_ok=True)
            self.store.export_history(logging_dir)
        kl = torch.cat(all_kl)
        total = self.engine.all_reduce_sum(torch.tensor([kl.sum().item(), float(kl.numel())], dtype=torch.float64))
        self.mean_kl = (total[0] / total[1].clamp(min=1)).item()
        stats = self.rollout_stats(torch.cat(all_scores), timer, tokens)
        self.metrics_log.write(self.iter_count, "rollout", stats)
        self.hooks.rlkit_rollouts_made(trainer=self, step=self.iter_count, num_rollouts=len(self.store), stats=stats,
                                       is_main_process=self.is_main_process)

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

    def rollout_stats(self, scores: torch.Tensor, timer: dict[str, float], tokens: dict[str, int]) -> dict[str, float]:
        stats = {
            "rollout_scores/mean": scores.mean().item(),
            "rollout_scores/std": scores.std().item() if scores.numel() > 1 else 0.0,
            "policy/sqrt_kl": max(self.mean_kl, 0.0) ** 0.5,
            "kl_ctl_value": float(self.kl_ctl.value),
        }
        for phase, seconds in timer.items():
            stats[f"time/rollout_{phase}"] = seconds
        stats["tokens_per_second/generate"] = tokens["generate"] / max(timer["generate"], 1e-9)
        stats["tokens_per_second/forward"] = tokens["forward"] / max(timer["forward"], 1e-9)
        return stats

    # --- learning ----------------------------------------------------------------------------

    def prepare_learning(self) -> None:
        if len(self.store) == 0:
            raise RlkitError("PPO has no rollouts: call make_experience before learn (train() does)")
        self.n_inner_epochs = self.config.method.ppo_epochs
        self.total_steps = min(self.config.train.total_steps, self.config.train.epochs * self.n_inner_epochs * self.steps_per_pass())

    def collate(self, items) -> PPOTrainBatch:
        rollouts = self.store.collate(items)
        advantages, returns = self.config.method.get_advantages_and_returns(
            rollouts.values, rollouts.rewards, mask=rollouts.response_mask, all_reduce=self.engine.all_reduce_sum)
        return PPOTrainBatch(rollouts, advantages, returns)

    def loss(self, outputs, batch: PPOTrainBatch):
        b = batch.rollouts
        return self.config.method.loss(outputs["logprobs"], outputs["values"], b.logprobs, b.values,
                                       batch.advantages, batch.returns, b.response_mask)

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
        }

    def load_method_state(self, state: dict[str, Any]) -> None:
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.running_moments.load_state_dict(state["running_moments"])
        self.ref_mean, self.ref_std = state["ref"]
        self.mean_kl = state["mean_kl"]
        self.prompt_position = tuple(state["prompt_position"])
        self.store.clear_history()
        self.store.push([PPORLElement(**e) if isinstance(e, dict) else e for e in state["store"]])
