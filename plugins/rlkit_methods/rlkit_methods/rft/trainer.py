"""``RFTTrainer``: rejection-sampling fine-tuning against a reward function, on any engine.

Each epoch trains one pass over a store of selected samples; between epochs
(``make_experience``) the store is rebuilt:

* on a growth step (epoch ``e`` with ``e mod n_improve_steps == 0``) every rank samples
  ``n_generations_per_prompt`` outputs for each of its prompts; the decoded samples are
  gathered, scored once on the main process, and every rank adds all of them to the same
  per-prompt pool (kept across growth steps);
* every epoch keeps, per prompt, the pooled samples scoring at least the prompt's threshold
  at this epoch's percentile (:mod:`rlkit_methods.rft.selection`) and fine-tunes on them,
  cross-entropy on the output tokens (:mod:`rlkit_methods.rft.store`).

The selection is identical on every rank, so the store is split over the data-parallel ranks
like an offline store. Epoch ``e`` trains on the selection of improve step ``e mod n`` (trlX
built the selection before counting the epoch, so its first two epochs both used step 0).
"""

from __future__ import annotations

from typing import Any

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError

from rlkit_methods.online import OnlineTrainer, PhaseTimer, Responses
from rlkit_methods.rft.selection import add_generations, is_growth_step, select_samples
from rlkit_methods.rft.store import make_rft_store
from rlkit_methods.sft.losses import output_nll


class RFTTrainer(OnlineTrainer):
    method_name = "rft"
    forward_kind = "tokens"
    shard_store = True  # every rank holds the same selection: split it like an offline store

    def __init__(self, config, reward_fn=None, **kwargs):
        super().__init__(config, reward_fn=reward_fn, **kwargs)
        if self.engine.is_seq2seq:
            raise ConfigError("model.model_arch_type: RFT trains causal LMs (as trlX's); use causal, or SFT/PPO for seq2seq")
        self.pool: dict[str, list[tuple[str, float]]] = {}  # prompt -> [(output, score)], kept across growth steps
        self.epoch_count = 0
        self.store = None

    def model_spec(self) -> ModelSpec:
        return ModelSpec("lm", num_layers_unfrozen=self.config.model.num_layers_unfrozen)

    # --- experience ----------------------------------------------------------------------------

    def sample_prompts(self, timer: PhaseTimer) -> Responses:
        """``n_generations_per_prompt`` samples of each of this rank's prompts.

        Each generation call holds ``train.batch_size`` (prompt, repeat) rows, as many rows as
        trlX's calls held prompts, so the same memory makes fewer, fuller calls."""
        engine, pipeline, method = self.engine, self.prompt_pipeline, self.config.method
        indices = list(range(engine.process_index, len(pipeline), engine.num_processes))
        rows = [i for i in indices for _ in range(method.n_generations_per_prompt)]
        size = self.config.train.batch_size
        samples = Responses()
        for start in range(0, len(rows), size):
            samples.extend(self.sample_responses(pipeline.collate([pipeline[i] for i in rows[start : start + size]]), timer))
        samples.metadata = [{} for _ in samples.prompts]  # trlX's RFT gives its reward function no metadata
        return samples

    def score(self, samples: Responses) -> tuple[list[str], list[str], list[float]]:
        """Every rank's samples, scored once on the main process; the same lists on every rank."""
        def score(rows) -> list[tuple[str, str, float]]:
            scores = self.reward_scores(rows)
            if any(isinstance(s, list) for s in scores):
                raise ConfigError("reward: RFT ranks whole samples; give one score per sample, not one per token")
            return [(row[1], row[2], float(s)) for row, s in zip(rows, scores)]

        scored = self.score_samples(samples, score, mine=False, append_eos_token=True)
        return [p for p, _, _ in scored], [o for _, o, _ in scored], [s for _, _, s in scored]

    @torch.no_grad()
    def make_experience(self, num_rollouts: Any = None, iter_count: int = 0) -> None:
        """Grow the pool on a growth step, then select this epoch's store. (``num_rollouts`` is
        ``train()``'s argument for online methods; RFT samples a fixed number per prompt.)"""
        self.check_ready()
        method = self.config.method
        stats: dict[str, float] = {}
        timer = None
        if is_growth_step(self.epoch_count, method.n_improve_steps) or not self.pool:
            if self.progress_bar is not None:
                self.progress_bar.show_phase("rollout")
            timer = PhaseTimer(("generate", "score"))
            samples = self.sample_prompts(timer)
            with timer.time("score"):
                prompts, outputs, scores = self.score(samples)
            add_generations(self.pool, prompts, outputs, scores)
            stats["rollout_scores/mean"] = sum(scores) / len(scores)
        self.select()
        stats.update(self.selection_stats)
        self.finish_phase(stats, timer)

    def select(self) -> None:
        """This epoch's store: the pooled samples above their prompt's threshold."""
        method = self.config.method
        percentile = method.percentile(self.epoch_count)
        selected, thresholds = select_samples(self.pool, percentile)
        self.store = make_rft_store(selected, self.tokenizer, self.config.train.seq_length)
        pooled = [score for samples in self.pool.values() for _, score in samples]
        self.selection_stats = {
            "rft/percentile": percentile,
            "rft/threshold_mean": float(thresholds.mean()),
            "rft/pool_size": float(len(pooled)),
            "rft/pool_score_mean": sum(pooled) / len(pooled),
            "rft/selected": float(len(selected)),
        }

    # --- learning ------------------------------------------------------------------------------

    def prepare_learning(self) -> None:
        if self.store is None:
            self.make_experience()
        self.n_inner_epochs = 1
        # the store's size changes every epoch, so trlX could not estimate the steps: total_steps it is
        self.total_steps = self.config.train.total_steps

    def loss(self, outputs, batch):
        """Cross-entropy on the selected outputs' tokens (the engine's ``tokens`` forward)."""
        loss = output_nll(outputs["logprobs"], outputs["mask"])
        return loss, {"loss": loss.item()}

    def post_epoch_callback(self) -> None:
        self.epoch_count += 1
        self.make_experience()

    # --- checkpoint state ----------------------------------------------------------------------

    def method_state(self) -> dict[str, Any]:
        return {"epoch_count": self.epoch_count,
                "pool": {prompt: [[output, score] for output, score in samples] for prompt, samples in self.pool.items()}}

    def load_method_state(self, state: dict[str, Any]) -> None:
        self.epoch_count = int(state["epoch_count"])
        self.pool = {prompt: [(output, float(score)) for output, score in samples] for prompt, samples in state["pool"].items()}
        self.select()  # the selection is a function of the pool and the epoch
