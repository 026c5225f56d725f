"""PPO as trlX's NeMo PPO ran it: its own loop of rollout phases (Megatron sampling, reward on
every data-parallel rank, reference and value forward passes) and ``ppo_epochs`` of
optimisation through Megatron's schedule; the KL controller (fixed or adaptive) updates once
per phase. The reference model is a frozen copy of the initial policy (no heads), so it
equals the policy exactly at step 0."""

from __future__ import annotations

import time
from functools import partial

import torch

from rlkit_core.errors import ConfigError, RlkitError

from rlkit_nemo.trainers.base import NeMoTrainer, split_batch


def value_head(config, vocab_size):
    from rlkit_nemo.models.heads import ParallelMLPHead

    return ParallelMLPHead(config, config.hidden_size, 1)


class NeMoPPOTrainer(NeMoTrainer):
    def __init__(self, config, metric_fn=None, megatron_cfg=None, pretrained_model=None, **kwargs):
        from rlkit_methods.common.stats import RunningMoments
        from rlkit_methods.ppo.store import PPORolloutStorage

        reward_fn = kwargs.pop("reward_fn", None)
        if reward_fn is None:
            raise ConfigError("reward: PPO needs a reward function (train(reward_fn=...) or reward: in the config)")
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, megatron_cfg=megatron_cfg,
                         pretrained_model=pretrained_model,
                         make_heads=value_head, **kwargs)
        self.engine.require_single_stage("PPO's rollouts (Megatron sampling)")
        self.ref = self._frozen_reference()
        self.kl_ctl = config.method.make_kl_controller()
        self.store = PPORolloutStorage(self.tokenizer.pad_token_id, "left")
        self.running = RunningMoments()
        self.ref_std = config.method.ref_std
        self.mean_kl = 0.0
        self.timing: dict[str, float] = {}

    def _frozen_reference(self):
        """A second model with the policy's current (initial) weights, no heads, frozen."""
        from rlkit_nemo.models.build import build_gpt
        from rlkit_nemo.models.sharding import load_full_state_dict

        full = {k: v for k, v in self.engine.full_state_dict().items() if not k.startswith("heads.")}
        ref = build_gpt(self.engine.model_cfg, self.engine.vocab_size, cpu=self.engine.cpu)
        load_full_state_dict(ref, full)
        return ref.to(self.engine.device).eval().requires_grad_(False)

    # --- rollouts -----------------------------------------------------------------------------

    def _prompt_batches(self):
        """This data-parallel rank's share of the prompts, chunk by chunk, forever."""
        engine, chunk = self.engine, self.config.method.chunk_size
        n = len(self.prompt_pipeline)
        while True:
            for start in range(engine.dp_rank * chunk, n, chunk * engine.dp_world):
                yield self.prompt_pipeline.collate([self.prompt_pipeline[i] for i in range(start, min(start + chunk, n))])

    def make_experience(self, num_rollouts: int = 1024, iter_count: int = 0) -> None:
        """``num_rollouts`` rollouts per data-parallel rank into ``self.store``."""
        from rlkit_methods.common.validate import check_scores
        from rlkit_methods.data.padding import position_ids_from_mask
        from rlkit_methods.ppo.losses import clip_scores, kl_penalty_rewards, scale_scores
        from rlkit_methods.ppo.store import PPORLElement, response_mask

        from rlkit_nemo.losses import vocab_parallel_logprobs

        if not hasattr(self, "_prompts"):
            self._prompts = self._prompt_batches()
        method, tok, engine = self.config.method, self.tokenizer, self.engine
        elements, kls, t = [], [], {"generate": 0.0, "score": 0.0, "forward": 0.0}
        while len(elements) < num_rollouts:
            batch = next(self._prompts)
            q, qmask = batch["input_ids"], batch["attention_mask"]
            t0 = time.perf_counter()
            responses = engine.sample(q, qmask, **self.gen_kwargs())
            rmask = response_mask(responses, tok.eos_token_id)
            t1 = time.perf_counter()
            prompts = tok.batch_decode(q, skip_special_tokens=True)
            outputs = [tok.decode(r[m.bool()], skip_special_tokens=True) for r, m in zip(responses, rmask)]
            raw = self.reward_fn(samples=[p + o for p, o in zip(prompts, outputs)], prompts=prompts, outputs=outputs, tokenizer=tok)
            scores = torch.tensor(check_scores(raw, len(outputs)), dtype=torch.float32)
            scores = clip_scores(scores, method.cliprange_reward)
            if method.scale_reward == "running":
                self.running.update(scores)
            if method.scale_reward == "ref" and self.ref_std is None:
                self.ref_std = float(scores.std())
            scores = scale_scores(scores, method.scale_reward, running_std=self.running.std, ref_std=self.ref_std)
            t2 = time.perf_counter()
            ids, mask = torch.cat([q, responses], 1), torch.cat([qmask, rmask], 1)
            pos, R = position_ids_from_mask(mask), responses.shape[1]
            self.engine.module.eval()
            logits, values = engine.forward(engine.module, ids, mask, pos)
            ref_logits = engine.forward(self.ref, ids, mask, pos)
            self.engine.module.train()
            resp = responses.to(engine.device)
            logprobs = vocab_parallel_logprobs(logits[:, -R - 1 : -1], resp).cpu()
            ref_logprobs = vocab_parallel_logprobs(ref_logits[:, -R - 1 : -1], resp).cpu()
            values = values[:, -R - 1 : -1, 0].float().cpu()
            rewards, kl = kl_penalty_rewards(logprobs, ref_logprobs, rmask, self.kl_ctl.value, scores)
            t3 = time.perf_counter()
            for i in range(len(outputs)):
                n = int(rmask[i].sum())
                elements.append(PPORLElement(
                    query_tensor=q[i], query_mask=qmask[i], response_tensor=responses[i, :n],
                    logprobs=logprobs[i, :n], values=values[i, :n], rewards=rewards[i, :n],
                ))
            kls.append(kl)
            for k, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2)):
                t[k] += dt
        self.store.push(elements[:num_rollouts])
        self.mean_kl = self._dp_mean(torch.cat(kls).mean())
        self.timing = {f"time/rollout_{k}": v for k, v in t.items()}
        self.hook("rlkit_rollouts_made", step=iter_count, num_rollouts=len(self.store),
                  stats={"policy/sqrt_kl": self.mean_kl ** 0.5, **self.timing})

    def _dp_mean(self, x: torch.Tensor) -> float:
        x = x.detach().float().reshape(1).clone()
        if self.engine.dp_world > 1:
            torch.distributed.all_reduce(x, group=self.engine.ps.get_data_parallel_group())
            x /= self.engine.dp_world
        return float(x)

    # --- optimisation -------------------------------------------------------------------------

    def learn(self) -> None:
        from rlkit_nemo.losses import ppo_inputs, ppo_loss, prepare_ppo

        if len(self.store) == 0:
            raise RlkitError("PPO has no rollouts: call make_experience before learn (train() does)")
        method, engine = self.config.method, self.engine
        mbs, n_micro = engine.batch_sizes()
        per_step = mbs * n_micro
        loss = partial(ppo_loss, method)
        while self.iter_count < self.config.train.total_steps:
            for _ in range(method.ppo_epochs):
                for start in range(0, len(self.store) - per_step + 1, per_step):
                    rollouts = self.store.collate([self.store[i] for i in range(start, start + per_step)])
                    t0 = time.perf_counter()
                    micro = [prepare_ppo(method, b) for b in split_batch(rollouts, n_micro)]
                    stats = engine.step(micro, ppo_inputs, loss)
                    self.iter_count += 1
                    self.record({**stats, "kl_ctl_value": self.kl_ctl.value, "time/train": time.perf_counter() - t0, **self.timing})
                    if self.iter_count >= self.config.train.total_steps:
                        return
            # once per rollout phase, with n_steps = the phase's rollouts over all ranks
            self.kl_ctl.update(self.mean_kl, n_steps=len(self.store) * engine.dp_world)
            self.store.clear_history()
            self.make_experience(method.num_rollouts, self.iter_count)
