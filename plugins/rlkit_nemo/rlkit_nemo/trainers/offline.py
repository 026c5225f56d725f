"""ILQL and SFT: a fixed store, cycled through in a seeded order (``ShuffledCyclicSequence``,
as trlX fed Megatron's sampler), one Megatron step per global batch."""

from __future__ import annotations

from functools import partial

import torch

from rlkit_core.errors import RlkitError

from rlkit_nemo.data import ShuffledCyclicSequence
from rlkit_nemo.trainers.base import NeMoTrainer, split_batch


class OfflineNeMoTrainer(NeMoTrainer):
    def step_inputs_and_loss(self):
        raise NotImplementedError

    def after_step(self) -> None:
        pass

    def learn(self) -> None:
        if not getattr(self, "store", None):
            raise RlkitError(f"{type(self).__name__}: no data; call make_experience before learn (train() does)")
        engine = self.engine
        mbs, n_micro = engine.batch_sizes()
        per_rank = mbs * n_micro
        steps = self.config.train.total_steps
        order = ShuffledCyclicSequence(steps * per_rank * engine.dp_world, self.store, self.config.train.seed)
        inputs, loss = self.step_inputs_and_loss()
        while self.iter_count < steps:
            start = (self.iter_count * engine.dp_world + engine.dp_rank) * per_rank
            batch = self.store.collate([order[i] for i in range(start, start + per_rank)])
            stats = engine.step(split_batch(batch, n_micro), inputs, loss)
            self.iter_count += 1
            self.after_step()
            self.record(stats)


class NeMoILQLTrainer(OfflineNeMoTrainer):
    """ILQL on a Megatron GPT with V, Q and target-Q heads (Q vocab-parallel)."""

    def __init__(self, config, reward_fn=None, logit_mask=None, metric_fn=None, stop_sequences=None,
                 train_mode=True, megatron_cfg=None, pretrained_model=None, **kwargs):
        method = config.method

        def make_heads(mc, vocab):
            from rlkit_nemo.models.heads import ILQLHeads

            return ILQLHeads(mc, mc.hidden_size, vocab, two_qs=method.two_qs, alpha=method.alpha)

        self.train_mode = train_mode
        super().__init__(
            config, reward_fn=reward_fn, metric_fn=metric_fn, stop_sequences=stop_sequences, logit_mask=logit_mask,
            megatron_cfg=megatron_cfg, pretrained_model=pretrained_model,
            make_heads=make_heads,
            **kwargs,
        )

    def make_experience(self, samples, rewards, max_length=2048) -> None:
        from rlkit_methods.ilql.store import make_experience

        self.store = make_experience(samples, rewards, self.tokenizer, max_length)
        if not hasattr(self.store, "collate"):
            from rlkit_methods.ilql.store import ilql_collate_fn

            self.store.collate = ilql_collate_fn

    def step_inputs_and_loss(self):
        from rlkit_nemo.losses import ilql_inputs, ilql_loss

        return ilql_inputs, partial(ilql_loss, self.config.method)

    def after_step(self) -> None:
        # every steps_for_target_q_sync optimizer steps, on the stage that holds the heads
        if self.config.method.should_sync_target(self.iter_count) and self.engine.is_last_stage:
            self.engine.module.heads.sync_target_q_heads(self.config.method.alpha)

    def sample_extras(self) -> dict:
        """Q-guided decoding: logits + beta * (min_i target Q_i - V) (trlX's ILQL sampling);
        ``logit_mask[prev, next]`` True forbids ``next`` after ``prev`` (trlX's rule)."""
        from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region as gather

        beta = float((self.config.method.gen_kwargs or {}).get("beta", 1.0))
        mask = None if self.logit_mask is None else torch.as_tensor(self.logit_mask, dtype=torch.bool)

        def guide(logits, heads, last_tokens):
            _, target_qs, vs = heads
            q = gather(target_qs[0][:, -1].float())
            for tq in target_qs[1:]:
                q = q.minimum(gather(tq[:, -1].float()))
            logits = logits + beta * (q - vs[:, -1].float())
            if mask is not None:
                logits = logits.masked_fill(mask.to(logits.device)[last_tokens], float("-inf"))
            return logits

        return {"logits_fn": guide}


class NeMoSFTTrainer(OfflineNeMoTrainer):
    """Supervised fine-tuning: next-token cross-entropy on the output tokens, vocab-parallel."""

    def __init__(self, config, reward_fn=None, metric_fn=None, stop_sequences=None, megatron_cfg=None,
                 pretrained_model=None, **kwargs):
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, stop_sequences=stop_sequences,
                         megatron_cfg=megatron_cfg, pretrained_model=pretrained_model, **kwargs)

    def make_experience(self, samples, max_length=2048) -> None:
        from rlkit_methods.sft.store import make_sft_experience

        self.store = make_sft_experience(samples, self.tokenizer, max_length)

    def step_inputs_and_loss(self):
        from rlkit_nemo.losses import sft_inputs, sft_loss

        return sft_inputs, sft_loss
