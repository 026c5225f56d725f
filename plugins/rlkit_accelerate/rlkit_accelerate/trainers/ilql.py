"""``AccelerateILQLTrainer``: offline ILQL from reward-labelled samples, Q-guided sampling."""

from __future__ import annotations

import inspect

from rlkit_core.errors import ConfigError
from rlkit_accelerate.models import CausalLMWithILQLHeads
from rlkit_accelerate.models.seq2seq_ilql import Seq2SeqLMWithILQLHeads
from rlkit_accelerate.trainers.base import AccelerateRLTrainer
from rlkit_accelerate.trainers.common import is_seq2seq, load_base_model, prepare_offline_learning

GENERATE_ARGS = set(inspect.signature(CausalLMWithILQLHeads.generate).parameters) - {"self", "input_ids", "attention_mask"}


class AccelerateILQLTrainer(AccelerateRLTrainer):
    method_name = "ilql"

    def setup_model(self):
        method = self.config.method
        unknown = sorted(set(method.gen_kwargs) - GENERATE_ARGS)
        if unknown:
            raise ConfigError(f"method.gen_kwargs: ILQL generation does not take {', '.join(unknown)}; use {', '.join(sorted(GENERATE_ARGS))}")
        heads = Seq2SeqLMWithILQLHeads if is_seq2seq(self.config) else CausalLMWithILQLHeads
        return heads(
            load_base_model(self.config), two_qs=method.two_qs, alpha=method.alpha,
            num_layers_unfrozen=self.config.model.num_layers_unfrozen,
        )

    def generate(self, input_ids, attention_mask=None, **kwargs):
        kwargs = {**self.generate_kwargs, **kwargs}
        if self.logit_mask is not None:
            kwargs.setdefault("logit_mask", self.logit_mask)
        device = self.accelerator.device
        with self.generating() as model:  # Q-guided decoding on the unwrapped model
            return model.generate(input_ids.to(device), attention_mask.to(device), **kwargs)

    def make_experience(self, samples, rewards, max_length: int = 2048) -> None:
        if is_seq2seq(self.config):
            from rlkit_accelerate.seq2seq_data import make_seq2seq_ilql_experience

            start = self.unwrapped_model.layout.decoder_start_token_id
            self.store = make_seq2seq_ilql_experience(samples, rewards, self.tokenizer, start, max_length)
        else:
            from rlkit_methods.ilql.store import make_experience

            self.store = make_experience(samples, rewards, self.tokenizer, max_length)

    def collate(self, items):
        if hasattr(self.store, "collate"):
            return self.store.collate(items)
        from rlkit_methods.ilql.store import ilql_collate_fn

        return ilql_collate_fn(items)

    def prepare_learning(self) -> None:
        prepare_offline_learning(self)

    def loss(self, batch):
        # the batch's fields are the model's inputs (causal: input_ids, position_ids, ...;
        # seq2seq: encoder input_ids and decoder_input_ids)
        inputs = {k: getattr(batch, k) for k in self.model_inputs if getattr(batch, k, None) is not None}
        out = self.model(**inputs, states_ixs=batch.states_ixs, actions_ixs=batch.actions_ixs)
        return self.config.method.loss((out.logits, (out.qs, out.target_qs, out.vs)), batch)

    @property
    def model_inputs(self) -> tuple[str, ...]:
        if is_seq2seq(self.config):
            return ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
        return ("input_ids", "attention_mask", "position_ids")

    def after_optimizer_step(self) -> None:
        # every steps_for_target_q_sync optimizer steps (trlX synced once per pass)
        if self.config.method.should_sync_target(self.iter_count):
            self.unwrapped_model.sync_target_q_heads(self.config.method.alpha)
