"""``DPOTrainer``: direct preference optimisation on any engine, on the ``response`` forward.

The reference log-probs log pi_ref(y|x) of every pair come from the initial policy without a
second full model: precomputed once, with the policy's own weights before the first step
(``precompute_ref_log_probs``, or whenever the engine's reference would be a full copy), or
from the engine's frozen reference at each step when it is cheap (a hydra branch above a frozen
trunk for ``num_layers_unfrozen >= 0``, or the LoRA model with its adapters switched off).
"""

from __future__ import annotations

from typing import Any

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError

from rlkit_methods.loop.offline import OfflineTrainer
from rlkit_methods.preferences.losses import dpo_loss, dpo_metrics, sequence_logps
from rlkit_methods.preferences.store import pairs_of


class DPOTrainer(OfflineTrainer):
    method_name = "dpo"
    forward_kind = "response"

    def uses_engine_reference(self) -> bool:
        """Whether the engine keeps a reference that costs no second model."""
        model = self.config.model
        return not self.config.method.precompute_ref_log_probs and (model.num_layers_unfrozen >= 0 or bool(model.peft_config))

    def model_spec(self) -> ModelSpec:
        options = {"disable_dropout": True} if self.config.method.disable_dropout else {}
        return ModelSpec("lm", reference=self.uses_engine_reference(), num_layers_unfrozen=self.config.model.num_layers_unfrozen,
                         options=options)

    def make_experience(self, samples, seq_length: int = 2048) -> None:
        if self.engine.is_seq2seq:
            raise ConfigError("model.model_arch_type: DPO is built for causal LMs here; use causal")
        from rlkit_methods.preferences.store import make_pair_store

        try:
            self.store = make_pair_store(samples, self.tokenizer, seq_length)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def prepare_learning(self) -> None:
        super().prepare_learning()
        # learn() restores a checkpoint only after this: the weights here are the initial policy's
        if not self.uses_engine_reference() and "ref_chosen_logps" not in self.store.items[0]:
            micro = self.engine.batch_sizes()[1]
            for start in range(0, len(self.store), micro):  # every rank the whole store: no collective beyond forward
                self.attach_reference(self.store.items[start : start + micro])

    def attach_reference(self, items: list[dict[str, Any]]) -> None:
        """log pi_ref(y^c|x) and log pi_ref(y^r|x) into each item (summed, or averaged for IPO);
        from the engine's reference also the frozen trunk's hidden states where the engine
        keeps them, so that the step's training forward runs only the top (one trunk pass
        per step, shared by the reference and the policy, as trlX's hydra forward)."""
        batch = self.store.collate(items)
        trunks = None
        if self.uses_engine_reference():
            out = self.engine.forward("response", batch, want=("ref_logprobs", "no_logprobs", "trunk"))
            logprobs, trunks = out["ref_logprobs"], out.get("trunk")
        else:
            logprobs = self.engine.forward("response", batch)["logprobs"]
        logps = sequence_logps(logprobs, batch["response_mask"], average=self.config.method.loss_type == "ipo")  # (2B,)
        chosen, rejected = pairs_of(logps)
        for item, chosen, rejected in zip(items, chosen.tolist(), rejected.tolist()):
            item["ref_chosen_logps"], item["ref_rejected_logps"] = chosen, rejected
        if trunks:  # one (prompt + completion tokens, H) row per sequence, chosen then rejected
            for item, chosen, rejected in zip(items, trunks[0::2], trunks[1::2]):
                item["trunk_chosen"], item["trunk_rejected"] = chosen, rejected

    def train_step(self, indices: list[int]) -> dict[str, float]:
        items = [self.store[i] for i in indices]
        if self.uses_engine_reference():  # the frozen reference, one no-grad pass per micro-batch
            items = [dict(item) for item in items]
            micro = self.engine.batch_sizes()[1]
            for start in range(0, len(items), micro):
                self.attach_reference(items[start : start + micro])
        return self.engine.step(self.forward_kind, items, self.collate, self.loss)

    def loss(self, outputs, batch):
        method = self.config.method
        logps = sequence_logps(outputs["logprobs"], batch["response_mask"], average=method.loss_type == "ipo")  # (2B,)
        chosen, rejected = pairs_of(logps)
        ref_chosen, ref_rejected = pairs_of(batch["ref_logps"].to(logps.device, logps.dtype))
        losses, chosen_rewards, rejected_rewards = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=method.beta,
                                                            loss_type=method.loss_type, label_smoothing=method.label_smoothing)
        loss = losses.mean()
        return loss, {"loss": loss.item(), **dpo_metrics(chosen_rewards, rejected_rewards, chosen, rejected)}
