"""``AcceleratePPOTrainer``: online PPO against a reward function.

A rollout phase (``make_experience``) samples responses for chunks of prompts, scores the
decoded text with the reward function on the main process, and runs the policy, value and
reference forward passes on the *sampled ids* (never re-tokenized text). Per-token rewards
are the KL penalty plus the score on the last generated token, which is inside the loss mask.
The KL controller is updated once per rollout phase. Every phase is timed, with tokens/s.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from accelerate.utils import broadcast_object_list, gather_object

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_methods.loop.batching import pass_batches
from rlkit_accelerate.models import CausalLMWithValueHead
from rlkit_accelerate.models.seq2seq import Seq2SeqLMWithValueHead
from rlkit_accelerate.trainers.base import AccelerateRLTrainer
from rlkit_accelerate.trainers.common import is_seq2seq, load_base_model, steps_per_pass


class AcceleratePPOTrainer(AccelerateRLTrainer):
    method_name = "ppo"
    # keep the frozen trunk's output from each rollout for its PPO epochs (when the policy
    # allows: see CausalLMWithValueHead.caches_trunk); False runs the trunk every time
    cache_trunk = True

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        from rlkit_methods.common.stats import RunningMoments
        from rlkit_methods.ppo.store import PPORolloutStorage

        method = config.method
        if method.num_topk_samples != 1:
            raise ConfigError("method.num_topk_samples: best-of-n rollouts are not supported by AcceleratePPOTrainer yet; use 1")
        if self.reward_fn is None:
            raise ConfigError("reward: PPO needs a reward function (train(reward_fn=...) or reward: in the config)")
        self.kl_ctl = method.make_kl_controller()
        self.running_moments = RunningMoments()
        self.ref_mean, self.ref_std = method.ref_mean, method.ref_std
        self.mean_kl = 0.0
        # prompts left-padded whatever tokenizer.padding_side says: the policies read the state
        # before the first response token in the prompt's last column, as at rollout time
        self.store = PPORolloutStorage(self.tokenizer.pad_token_id, "left")
        experience = method.gen_experience_kwargs or method.gen_kwargs
        self.experience_kwargs, _ = self.generation_settings({k: (v[0] if isinstance(v, list) else v) for k, v in experience.items()})
        self.prompt_pipeline = None
        self.prompt_position = (0, 0)  # (pass over the prompts, next chunk)

    def setup_model(self):
        # both policies share one interface: forward / score_rollout over (prompt, response)
        policy = Seq2SeqLMWithValueHead if is_seq2seq(self.config) else CausalLMWithValueHead
        return policy(
            load_base_model(self.config),
            num_layers_unfrozen=self.config.model.num_layers_unfrozen,
            num_value_layers_unfrozen=self.config.method.num_value_layers_unfrozen,
        )

    def add_prompt_pipeline(self, pipeline) -> None:
        self.prompt_pipeline = pipeline

    # --- rollouts ----------------------------------------------------------------------------

    def next_prompt_chunk(self) -> dict[str, Any]:
        """The next chunk of prompts for this process; a new shuffled pass when one ends."""
        acc = self.accelerator
        pass_index, chunk = self.prompt_position
        while True:
            chunks = pass_batches(len(self.prompt_pipeline), self.config.method.chunk_size, seed=self.config.train.seed,
                                  pass_index=pass_index, rank=acc.process_index, world_size=acc.num_processes)
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
        """Reward on the main process (once per sample), scores scattered back to each process."""
        from rlkit_methods.common.validate import check_scores

        acc = self.accelerator
        local = list(zip(str_samples, str_prompts, str_outputs, [dict(zip(metadata, v)) for v in zip(*metadata.values())] or [{}] * len(str_samples)))
        everything = gather_object([local]) if acc.num_processes > 1 else [local]
        payload = [None]
        if self.is_main_process:
            flat = [row for part in everything for row in part]
            keys = flat[0][3].keys() if flat else []
            extra = {k: [row[3][k] for row in flat] for k in keys}
            scores = self.score("reward_fn", [r[0] for r in flat], [r[1] for r in flat], [r[2] for r in flat], extra, self.iter_count)
            scores = check_scores(scores, len(flat))
            sizes = [len(part) for part in everything]
            payload = [[scores[sum(sizes[:i]) : sum(sizes[: i + 1])] for i in range(len(sizes))]]
        if acc.num_processes > 1:
            broadcast_object_list(payload)
        return payload[0][acc.process_index]

    @torch.no_grad()
    def make_experience(self, num_rollouts: int = 1024, iter_count: int = 0) -> None:
        """Collect ``num_rollouts`` rollouts on this process into ``self.store``."""
        from rlkit_methods.common.stats import logprobs_of_labels
        from rlkit_methods.data.padding import pad
        from rlkit_methods.ppo.losses import clip_scores, kl_penalty_rewards
        from rlkit_methods.ppo.store import PPORLElement

        if self.prompt_pipeline is None:
            raise RlkitError("PPO has no prompts: call add_prompt_pipeline (train() does) before make_experience")
        if self.progress_bar is not None:
            self.progress_bar.show_phase("rollout")
        method, device = self.config.method, self.accelerator.device
        model = self.unwrapped_model
        keep_trunk = self.cache_trunk and getattr(model, "caches_trunk", lambda: False)()
        was_training = model.training
        model.eval()
        timer = {"generate": 0.0, "score": 0.0, "forward": 0.0}
        tokens = {"generate": 0, "forward": 0}
        elements, all_scores, all_kl = [], [], []
        while len(elements) < num_rollouts:
            batch = self.next_prompt_chunk()
            start = time.time()
            samples = self.generate(batch["input_ids"], batch["attention_mask"], **self.experience_kwargs).cpu()
            timer["generate"] += time.time() - start
            width = batch["input_ids"].shape[1]
            prompts = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
            outputs = [row[width:].tolist() for row in samples]
            lengths = [self.response_length(o) for o in outputs]
            outputs = [o[:n] for o, n in zip(outputs, lengths)]
            tokens["generate"] += sum(lengths)

            start = time.time()
            metadata = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask", "position_ids")}
            str_samples, str_prompts, str_outputs = self.decode(prompts, [p + o for p, o in zip(prompts, outputs)])
            scores = self.score_rollouts(str_samples, str_prompts, str_outputs, metadata)
            timer["score"] += time.time() - start

            start = time.time()
            dense = any(isinstance(s, list) for s in scores)
            score_t = pad([torch.tensor(s if isinstance(s, list) else [s]) for s in scores], 0.0, "right") if dense else torch.tensor(scores)
            score_mask = pad([torch.ones(len(s) if isinstance(s, list) else 1) for s in scores], 0.0, "right") if dense else None
            score_t = clip_scores(score_t.float(), method.cliprange_reward)
            all_scores.append(score_t if not dense else (score_t * score_mask).sum(1))
            score_t = self.scale(score_t, score_mask)

            query = pad([torch.tensor(p) for p in prompts], self.tokenizer.pad_token_id, "left")  # (B, Q)
            response = pad([torch.tensor(o) for o in outputs], self.tokenizer.pad_token_id, "right")  # (B, R)
            q_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompts], 0, "left")
            r_mask = pad([torch.ones(len(o), dtype=torch.long) for o in outputs], 0, "right")
            response = response.to(device)
            with self.full_parameters():  # the unwrapped model runs outside FSDP's root forward
                out, ref_logits = model.score_rollout(query.to(device), q_mask.to(device), response, r_mask.to(device))
            logprobs = logprobs_of_labels(out.logits, response).float().cpu()  # (B, R)
            ref_logprobs = logprobs_of_labels(ref_logits, response).float().cpu()
            values = out.values.float().cpu()  # V(s_t) before each response token
            trunks = [None] * len(lengths)
            if keep_trunk:  # each rollout's trunk rows over its real prompt and response tokens
                real = torch.cat([q_mask, r_mask], dim=1).bool()
                trunks = [row[keep].cpu() for row, keep in zip(out.trunk_hidden, real)]
            rewards, kl = kl_penalty_rewards(logprobs, ref_logprobs, r_mask, self.kl_ctl.value, score_t, score_mask)
            all_kl.append(kl)
            tokens["forward"] += int(q_mask.sum() + r_mask.sum())
            timer["forward"] += time.time() - start
            for i, n in enumerate(lengths):
                elements.append(PPORLElement(
                    query_tensor=torch.tensor(prompts[i]), response_tensor=torch.tensor(outputs[i]),
                    logprobs=logprobs[i, :n], values=values[i, :n], rewards=rewards[i, :n], trunk=trunks[i],
                ))
        model.train(was_training)
        self.store.push(elements[:num_rollouts])
        logging_dir = self.config.train.rollout_logging_dir
        if logging_dir and self.is_main_process:  # the main process's rollouts of each phase
            os.makedirs(logging_dir, exist_ok=True)
            self.store.export_history(logging_dir)
        self.mean_kl = self._global_mean(torch.cat(all_kl))
        stats = self.rollout_stats(torch.cat(all_scores), timer, tokens)
        self.metrics_log.write(self.iter_count, "rollout", stats)
        self.hooks.rlkit_rollouts_made(trainer=self, step=self.iter_count, num_rollouts=len(self.store), stats=stats,
                                       is_main_process=self.is_main_process)

    def scale(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        from rlkit_methods.ppo.losses import scale_scores

        mode = self.config.method.scale_reward
        if mode == "ref" and self.ref_std is None:
            self.ref_mean, self.ref_std = scores.mean().item(), scores.std().item() if scores.numel() > 1 else 1.0
        running_std = None
        if mode == "running":
            self.running_moments.update(scores, mask)
            running_std = self.running_moments.std
        return scale_scores(scores, mode, running_std=running_std, ref_std=self.ref_std, mask=mask)

    def _global_mean(self, values: torch.Tensor) -> float:
        acc = self.accelerator
        total = torch.tensor([values.sum().item(), float(values.numel())], device=acc.device, dtype=torch.float64)
        total = acc.reduce(total, reduction="sum") if acc.num_processes > 1 else total
        return (total[0] / total[1].clamp(min=1)).item()

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
        per_pass = steps_per_pass(len(self.store), self.config.train.batch_size, 1)
        self.total_steps = min(self.config.train.total_steps, self.config.train.epochs * self.n_inner_epochs * per_pass)

    def train_batches(self, epoch: int, inner: int) -> list[list[int]]:
        # rollouts are per process: each process batches its own store
        pass_index = epoch * self.n_inner_epochs + inner
        return pass_batches(len(self.store), self.config.train.batch_size, seed=self.config.train.seed, pass_index=pass_index)

    def loss(self, batch):
        from rlkit_methods.common.stats import logprobs_of_labels

        method = self.config.method
        Q = batch.query_tensors.shape[1]
        mask = batch.response_mask  # (B, R)
        advantages, returns = method.get_advantages_and_returns(batch.values, batch.rewards, mask=mask)
        # a trunk kept from the rollout (frozen, dropout-free blocks) spares running it again
        cached = {"trunk_hidden": batch.trunk} if batch.trunk is not None else {}
        out = self.model(input_ids=batch.query_tensors, attention_mask=batch.attention_mask[:, :Q],
                         response_ids=batch.response_tensors, response_mask=mask, **cached)
        logprobs = logprobs_of_labels(out.logits, batch.response_tensors)  # (B, R)
        values = out.values
        return method.loss(logprobs.float(), values.float(), batch.logprobs, batch.values, advantages, returns, mask)

    def post_epoch_callback(self) -> None:
        # once per rollout phase, with n_steps = the rollouts of the phase (trlX: per PPO epoch)
        self.kl_ctl.update(self.mean_kl, n_steps=len(self.store) * self.accelerator.num_processes)
        self.store.clear_history()
        self.make_experience(self.config.method.num_rollouts, self.iter_count)

    # --- checkpoint state --------------------------------------------------------------------

    def method_state(self) -> dict[str, Any]:
        return {
            "kl_ctl": self.kl_ctl.state_dict(),
            "running_moments": self.running_moments.state_dict(),
            "ref": (self.ref_mean, self.ref_std),
            "mean_kl": self.mean_kl,
            "prompt_position": self.prompt_position,
            "store": list(self.store.history),
        }

    def load_method_state(self, state: dict[str, Any]) -> None:
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.running_moments.load_state_dict(state["running_moments"])
        self.ref_mean, self.ref_std = state["ref"]
        self.mean_kl = state["mean_kl"]
        self.prompt_position = tuple(state["prompt_position"])
        self.store.clear_history()
        self.store.push(state["store"])
