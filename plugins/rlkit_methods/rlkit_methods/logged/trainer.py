"""``LoggedPGTrainer``: policy gradient from logged (prompt, completion, reward) rows on any
engine, on the ``response`` forward of the plain LM. The advantages are computed once over the
whole data set (completions of the same prompt form a group); the importance weights per
token at each step, when the rows carry the behaviour policy's log-probs."""

from __future__ import annotations

import logging

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError

from rlkit_methods.logged.losses import importance_weights, logged_pg_loss
from rlkit_methods.loop.offline import OfflineTrainer

log = logging.getLogger(__name__)


class LoggedPGTrainer(OfflineTrainer):
    method_name = "logged_pg"
    forward_kind = "response"
    data_stats: dict = {}

    def model_spec(self) -> ModelSpec:
        options = {"disable_dropout": True} if self.config.method.disable_dropout else {}
        return ModelSpec("lm", num_layers_unfrozen=self.config.model.num_layers_unfrozen, options=options)

    def make_experience(self, samples, rewards, seq_length: int = 2048) -> None:
        if self.engine.is_seq2seq:
            raise ConfigError("model.model_arch_type: logged_pg is built for causal LMs here; use causal")
        from rlkit_methods.logged.store import make_logged_store

        method = self.config.method
        try:
            self.store, self.data_stats = make_logged_store(samples, rewards, self.tokenizer, seq_length,
                                                            advantage=method.advantage, scale_rewards=method.scale_rewards)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        single = int(self.data_stats["data/single_prompts"])
        if single and self.is_main_process:
            log.warning("%d of %d prompts have a single logged completion: their advantage is 0 (nothing to compare with)",
                        single, int(self.data_stats["data/prompts"]))

    def loss(self, outputs, batch):
        logprobs = outputs["logprobs"]  # (B, R)
        mask = batch["response_mask"].to(logprobs.dtype)
        advantages = batch["advantages"].to(logprobs.dtype)
        stats = {}
        weights = None
        if "behaviour_logprobs" in batch:
            cap = self.config.method.importance_sampling_cap
            weights = importance_weights(logprobs, batch["behaviour_logprobs"].to(logprobs.device), mask, cap)
            n = mask.sum().clamp(min=1)
            stats["policy/importance_weight_mean"] = (weights.sum() / n).item()
            stats["policy/importance_weight_max"] = weights.max().item()
            if cap is not None:
                stats["policy/truncated_fraction"] = ((weights >= cap) * mask).sum().item() / n.item()
        loss = logged_pg_loss(logprobs, advantages, mask, weights)
        stats.update({"loss": loss.item(), "policy/advantage_mean": advantages.mean().item(),
                      "policy/logprob_mean": ((logprobs.detach() * mask).sum() / mask.sum().clamp(min=1)).item()})
        return loss, stats
