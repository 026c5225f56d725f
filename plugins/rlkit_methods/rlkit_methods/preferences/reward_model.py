"""``RewardModelTrainer``: a reward model from preference pairs on any engine.

The engine builds the LM with a scalar head on its last hidden state (``ModelSpec("value")``
with the ``score_head`` option: one bias-free linear map, as HF's sequence classifiers) and
exports it as a plain ``AutoModelForSequenceClassification`` folder. The reward of a completion
is the head on the state after its last token: the ``response`` forward's value at the position
after the completion (the store adds one padding column for it), which is where HF's classifier
reads a sequence's score (its last non-padding token). Completions get no EOS added: the model
scores the text as given. Evaluation is pairwise accuracy on held-out pairs (chance: 0.5).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError

from rlkit_methods.loop.evaluation import record_evaluation
from rlkit_methods.loop.offline import OfflineTrainer
from rlkit_methods.preferences.losses import bradley_terry_loss, pairwise_accuracy
from rlkit_methods.preferences.store import PairStore, make_pair_store, pairs_of

SHOWN = 4  # held-out pairs shown as samples at each evaluation


class RewardModelTrainer(OfflineTrainer):
    method_name = "reward_model"
    forward_kind = "response"
    eval_store = None

    def model_spec(self) -> ModelSpec:
        options = {"score_head": True, "disable_dropout": self.config.method.disable_dropout}
        return ModelSpec("value", num_layers_unfrozen=self.config.model.num_layers_unfrozen, options=options)

    def make_experience(self, samples, seq_length: int = 2048) -> None:
        if self.engine.is_seq2seq:
            raise ConfigError("model.model_arch_type: the reward model is built for causal LMs here; use causal")

        try:
            store = make_pair_store(samples, self.tokenizer, seq_length, append_eos=False, extra_column=True)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        fraction = self.config.method.eval_fraction
        n_eval = min(max(round(fraction * len(store)), 1), len(store) - 1) if fraction and len(store) > 1 else 0
        order = torch.randperm(len(store), generator=torch.Generator().manual_seed(self.config.train.seed)).tolist()
        held_out = sorted(order[:n_eval])
        kept = [store.items[i] for i in sorted(order[n_eval:])]
        self.eval_store = PairStore([store.items[i] for i in held_out], store.pad_id, True) if held_out else None
        self.store = PairStore(kept, store.pad_id, True)

    def rewards(self, outputs: dict[str, Any], batch) -> torch.Tensor:
        """(2N,) rewards (chosen, rejected, ...): the head's value at the position after each completion."""
        values = outputs["values"]  # (2N, R + 1)
        return values.gather(1, batch["lengths"].to(values.device).unsqueeze(1)).squeeze(1).float()

    def loss(self, outputs, batch):
        chosen, rejected = pairs_of(self.rewards(outputs, batch))
        margin = pairs_of(batch["margin"].to(chosen.device))[0]
        loss = bradley_terry_loss(chosen, rejected, margin, self.config.method.center_rewards_coefficient)
        return loss, {"loss": loss.item(), **pair_stats(chosen.detach(), rejected.detach())}

    def evaluate(self) -> dict[str, Any]:
        """Pairwise accuracy and loss on the held-out pairs (every rank scores all of them)."""
        if self.eval_store is None:
            return {}
        start = time.time()
        chosen, rejected = [], []
        micro = self.engine.batch_sizes()[1]
        items = self.eval_store.items
        for i in range(0, len(items), micro):
            batch = self.eval_store.collate(items[i : i + micro])
            c, r = pairs_of(self.rewards(self.engine.forward("response", batch), batch))
            chosen.append(c)
            rejected.append(r)
        chosen, rejected = torch.cat(chosen), torch.cat(rejected)
        margins = torch.tensor([it.get("margin", 0.0) for it in items])
        stats = {f"metrics/{k.replace('/', '_')}": v for k, v in pair_stats(chosen, rejected).items()}
        stats["metrics/loss"] = bradley_terry_loss(chosen, rejected, margins, self.config.method.center_rewards_coefficient).item()
        stats["metrics/pairs"] = float(len(items))
        stats["time/evaluate"] = time.time() - start
        decode = self.tokenizer.decode
        rows = [{"prompt": decode(it["prompt"]), "output": decode(it["chosen"]), "rejected": decode(it["rejected"]),
                 "reward_chosen": c, "reward_rejected": r}
                for it, c, r in zip(items[:SHOWN], chosen.tolist(), rejected.tolist())]
        return record_evaluation(self, stats, rows)


def pair_stats(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, float]:
    """Accuracy (chosen strictly higher) and the mean rewards and margin, as TRL's reward trainer."""
    return {"accuracy": pairwise_accuracy(chosen, rejected).item(), "rewards/chosen": chosen.mean().item(),
            "rewards/rejected": rejected.mean().item(), "rewards/margins": (chosen - rejected).mean().item()}
