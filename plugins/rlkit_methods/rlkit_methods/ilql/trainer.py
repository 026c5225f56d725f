"""``ILQLTrainer``: offline ILQL from reward-labelled samples and Q-guided sampling, on any
engine. The engine builds the V, Q and target-Q heads and samples with them
(:class:`rlkit_core.engine.QGuidance`); the loss and the target sync schedule are here."""

from __future__ import annotations

from rlkit_core.engine import ModelSpec, QGuidance
from rlkit_core.errors import ConfigError

from rlkit_methods.ilql.losses import ilql_loss
from rlkit_methods.loop.offline import OfflineTrainer

# what Q-guided decoding takes (trlX's ILQL generate)
GENERATE_ARGS = ("beta", "top_k", "temperature", "max_new_tokens", "logit_mask", "eos_token_id", "pad_token_id",
                 "min_new_tokens",  # rlkit's, transformers' meaning (no EOS before that many)
                 "behaviour_top_k")  # rlkit's: only the behaviour policy's top k tokens (q_guided_logits)


class ILQLTrainer(OfflineTrainer):
    method_name = "ilql"
    forward_kind = "ilql"

    def model_spec(self) -> ModelSpec:
        method = self.config.method
        unknown = sorted(set(method.gen_kwargs) - set(GENERATE_ARGS))
        if unknown:
            raise ConfigError(f"method.gen_kwargs: ILQL generation does not take {', '.join(unknown)}; use {', '.join(sorted(GENERATE_ARGS))}")
        return ModelSpec("ilql", num_layers_unfrozen=self.config.model.num_layers_unfrozen,
                         options={"two_qs": method.two_qs, "alpha": method.alpha, "q_heads": method.q_heads})

    def generate(self, input_ids, attention_mask=None, **kwargs):
        kwargs = self.generation_kwargs(**kwargs)
        guidance = QGuidance(beta=kwargs.pop("beta", 1.0), logit_mask=kwargs.pop("logit_mask", self.logit_mask))
        return self.generator.generate(input_ids, attention_mask, guidance=guidance, **kwargs).ids

    def make_experience(self, samples, rewards, max_length: int = 2048) -> None:
        if self.engine.is_seq2seq:
            from rlkit_methods.data.seq2seq import make_seq2seq_ilql_experience

            self.store = make_seq2seq_ilql_experience(samples, rewards, self.tokenizer, self.engine.decoder_start_token_id, max_length)
        else:
            from rlkit_methods.ilql.store import make_experience

            self.store = make_experience(samples, rewards, self.tokenizer, max_length)

    def loss(self, outputs, batch):
        method = self.config.method
        if getattr(batch, "decoder_input_ids", None) is not None:
            actions = batch.decoder_input_ids[:, 1:]  # (B, A)
        else:
            actions = batch.input_ids[:, 1:].gather(1, batch.actions_ixs)  # (B, A): the token after each state
        vs = outputs["vs"]
        return ilql_loss(
            outputs["action_logits"], outputs["qs"], outputs["target_qs"], vs, actions, batch.rewards.to(vs.dtype), batch.dones,
            gamma=method.gamma, tau=method.tau, cql_scale=method.cql_scale, awac_scale=method.awac_scale, beta=method.beta,
        )

    def after_optimizer_step(self) -> None:
        # every steps_for_target_q_sync optimizer steps (trlX synced once per pass)
        if self.config.method.should_sync_target(self.iter_count):
            self.engine.sync_target(self.config.method.alpha)
