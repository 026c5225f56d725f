"""``OnlineTrainer``: the rollout scaffolding PPO, GRPO, RLOO and RFT share.

A rollout phase takes chunks of this rank's prompts (a new shuffled pass when one ends),
samples them, keeps each response up to EOS or the token that completes a stop sequence
(``truncated`` when neither came), scores every rank's samples once on the main process
(:func:`rlkit_methods.common.scoring.score_on_main`, which evaluation uses too), pads prompts
and responses into the engine's ``response`` batch, and records the phase's stats with its
timers and tokens/s. A method supplies what it makes of the samples.

It lives beside the methods, not in ``loop/``: the loop is run management every method
shares (offline ones too); this is what only online methods do.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import Samples, WeightUpdate, make_generator

from rlkit_methods.common.scoring import ScoreRow, call_scorer, score_on_main, scorer_arguments
from rlkit_methods.common.validate import check_scores
from rlkit_methods.data.padding import pad
from rlkit_methods.loop.batching import pass_batches
from rlkit_methods.loop.evaluation import NOT_METADATA
from rlkit_methods.loop.trainer import RLTrainer
from rlkit_methods.rollouts_ahead import RolloutsAhead


@dataclass
class Responses:
    """Sampled responses of one call (or several, :meth:`extend`), one entry per row."""

    prompts: list[list[int]] = field(default_factory=list)  # the prompt's real ids
    outputs: list[list[int]] = field(default_factory=list)  # kept response ids (at least one)
    truncated: list[bool] = field(default_factory=list)  # hit max_new_tokens without EOS or a stop sequence
    metadata: list[dict[str, Any]] = field(default_factory=list)  # the prompt's extra columns
    # the generator's log-probs of the kept ids (rlkit_core.generator), None where it has none
    logprobs: list[torch.Tensor | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version that sampled each row

    def extend(self, other: "Responses") -> None:
        for name in ("prompts", "outputs", "truncated", "metadata", "logprobs", "versions"):
            getattr(self, name).extend(getattr(other, name))

    def __len__(self) -> int:
        return len(self.outputs)


def clocks() -> tuple[float, float]:
    """(wall, this process's CPU) seconds now."""
    return time.time(), time.process_time()


class PhaseTimer:
    """Seconds and tokens per rollout phase part, reported as ``time/rollout_<part>`` (wall),
    ``cpu/rollout_<part>`` (this process's CPU seconds, every thread: on a shared machine the
    figure that measures the work) and ``tokens_per_second/<part>``."""

    def __init__(self, parts: tuple[str, ...] = ("generate", "score", "forward")):
        self.seconds = {part: 0.0 for part in parts}
        self.cpu_seconds = {part: 0.0 for part in parts}
        self.tokens = {"generate": 0, "forward": 0}

    @contextmanager
    def time(self, part: str):
        start = clocks()
        try:
            yield
        finally:
            self.add(part, start)

    def add(self, part: str, since: tuple[float, float], tokens: int = 0) -> None:
        """Count the work since ``since`` (``clocks()`` then) and its tokens towards ``part``."""
        wall, cpu = clocks()
        self.seconds[part] += wall - since[0]
        self.cpu_seconds[part] += cpu - since[1]
        if tokens:
            self.tokens[part] = self.tokens.get(part, 0) + tokens

    def stats(self) -> dict[str, float]:
        stats = {f"time/rollout_{part}": seconds for part, seconds in self.seconds.items()}
        stats.update({f"cpu/rollout_{part}": seconds for part, seconds in self.cpu_seconds.items()})
        for part, count in self.tokens.items():
            if count:
                stats[f"tokens_per_second/{part}"] = count / max(self.seconds.get(part, 0.0), 1e-9)
        return stats


class LogprobGap:
    """How far the generator's log-probs of the sampled tokens are from the trainer's forward
    over a phase (train/inference agreement): ``policy/logprob_gap_max`` and ``_mean`` over
    every rank's response tokens, logged with the phase's stats."""

    def __init__(self):
        self.total, self.count, self.max = 0.0, 0, 0.0

    def add(self, responses: "Responses", trainer_logprobs: torch.Tensor) -> None:
        for i, generated in enumerate(responses.logprobs):
            if generated is None:
                continue
            gap = (generated.float() - trainer_logprobs[i, : len(generated)].float()).abs()  # (n,)
            self.total += float(gap.sum())
            self.count += gap.numel()
            self.max = max(self.max, float(gap.max())) if gap.numel() else self.max

    def stats(self, engine) -> dict[str, float]:
        """Over every rank (collective: every rank calls it at the end of its phase)."""
        totals = engine.all_reduce_sum(torch.tensor([self.total, float(self.count)], dtype=torch.float64))
        largest = max(engine.gather_object(self.max))
        if float(totals[1]) == 0:
            return {}
        return {"policy/logprob_gap_max": largest, "policy/logprob_gap_mean": float(totals[0] / totals[1])}


class OnlineTrainer(RLTrainer):
    """A trainer that samples its own data from prompts and scores it with a reward function."""

    shard_store = False  # each rank trains on its own rollouts
    on_policy_only = "its loss has no importance ratio to correct samples of an older policy"

    def __init__(self, config, reward_fn=None, **kwargs):
        super().__init__(config, reward_fn=reward_fn, **kwargs)
        self.prompt_pipeline = None
        self.prompt_position = (0, 0)  # (pass over the prompts, next chunk)
        self.phase = 0  # rollout phases made
        self.ahead = RolloutsAhead(self, config.train.max_staleness) if config.train.async_rollouts else None
        self.engine_sampler = None  # evaluation's sampler while the generator samples ahead

    def add_prompt_pipeline(self, pipeline) -> None:
        self.prompt_pipeline = pipeline

    @property
    def display_name(self) -> str:
        return self.method_name.upper() or type(self).__name__

    def rollout_generation_kwargs(self) -> dict[str, Any]:
        """Rollout sampling settings: ``gen_experience_kwargs`` or ``gen_kwargs``, a swept setting's first value."""
        method = self.config.method
        experience = method.gen_experience_kwargs or method.gen_kwargs
        return self.generation_kwargs(**{k: (v[0] if isinstance(v, list) else v) for k, v in experience.items()})

    def check_ready(self) -> None:
        """A rollout phase needs a reward function and prompts."""
        if self.reward_fn is None:
            raise ConfigError(f"reward: {self.display_name} needs a reward function (train(reward_fn=...) or reward: in the config)")
        if self.prompt_pipeline is None:
            raise RlkitError(f"{self.display_name} has no prompts: call add_prompt_pipeline (train() does) before make_experience")

    # --- prompts and samples -----------------------------------------------------------------

    def next_prompt_chunk(self, size: int | None = None, repeat: int = 1) -> dict[str, Any]:
        """This rank's next ``size`` prompts (``method.chunk_size``), each ``repeat`` times in a
        row, collated; a new shuffled pass when one ends."""
        engine, pipeline = self.engine, self.prompt_pipeline
        size = size or self.config.method.chunk_size
        pass_index, chunk = self.prompt_position
        while True:
            chunks = pass_batches(len(pipeline), size, seed=self.config.train.seed, pass_index=pass_index,
                                  rank=engine.process_index, world_size=engine.num_processes)
            if chunk < len(chunks):
                break
            pass_index, chunk = pass_index + 1, 0
        self.prompt_position = (pass_index, chunk + 1)
        return pipeline.collate([pipeline[i] for i in chunks[chunk] for _ in range(repeat)])

    def rollout_chunk(self) -> dict[str, Any]:
        """The next prompt chunk a rollout phase samples."""
        return self.next_prompt_chunk()

    def phase_samples(self, num_rollouts: int, timer: PhaseTimer) -> Iterator[Responses]:
        """This phase's samples, chunk by chunk, until ``num_rollouts`` rows: sampled now, or
        (``train.async_rollouts``) those sampled ahead for it (:mod:`rlkit_methods.rollouts_ahead`)."""
        if self.ahead is not None and self.ahead.jobs:
            yield from self.ahead.take(self.phase)
            return
        if self.ahead is not None:  # the first phase of an asynchronous run: nothing was sampled ahead of it
            self.ahead.last = {"async/staleness": 0.0, "async/staleness_steps": 0.0,
                               "async/policy_version": float(self.iter_count)}
        rows = 0
        while rows < num_rollouts:
            part = self.sample_responses(self.rollout_chunk(), timer, sampler=self.sample_rollouts, **self.experience_kwargs)
            rows += len(part)
            yield part

    def sample_rollouts(self, input_ids, attention_mask=None, **kwargs) -> Samples:
        """Rollouts come from the generator, whatever samples evaluation (:meth:`sample`)."""
        return self.generator.generate(input_ids, attention_mask, **self.generation_kwargs(**kwargs))

    def sampler_logprobs(self, samples: Responses) -> list[torch.Tensor] | None:
        """The generator's log-probs of the kept tokens where the method reads them: for the
        truncated importance weight (``method.vllm_importance_sampling_correction``), or as pi_old
        of rollouts sampled ahead; None otherwise. One line when the generator gave none."""
        if not (self.importance_sampling or self.ahead is not None):
            return None
        if any(lp is None for lp in samples.logprobs):
            why = "its importance weight" if self.importance_sampling else "pi_old of rollouts sampled ahead"
            raise RlkitError(f"{self.display_name}: the generator ({type(self.generator).__name__}) gave no log-probs for "
                             f"these samples, which {why} needs (beam search and Q-guided decoding give none); turn off "
                             f"method.vllm_importance_sampling_correction and train.async_rollouts, or sample without beams")
        return samples.logprobs

    @property
    def importance_sampling(self) -> bool:
        return bool(getattr(self.config.method, "vllm_importance_sampling_correction", False))

    def cut_response(self, output_ids: list[int]) -> tuple[int, bool]:
        """(tokens kept, ended by itself): up to and including EOS, or up to the token that
        completes a stop sequence; all of it (at least one token) when neither came."""
        eos = self.tokenizer.eos_token_id
        length = len(output_ids)
        ended = eos in output_ids
        if ended:
            length = output_ids.index(eos) + 1
        if self.stop_sequences:
            for k in range(1, length + 1):
                text = self.tokenizer.decode(output_ids[:k], skip_special_tokens=True)
                if any(s in text for s in self.stop_sequences):
                    return k, True
        return max(length, 1), ended

    def sample_responses(self, batch: dict[str, Any], timer: PhaseTimer | None = None, *,
                         sampler: Callable[..., Samples] | None = None, **kwargs) -> Responses:
        """Sample a collated prompt batch through the generator (:meth:`sample`, or ``sampler``)
        and cut the responses, keeping the generator's log-probs of the kept tokens and its version."""
        start = clocks()
        generated = (sampler or self.sample)(batch["input_ids"], batch["attention_mask"], **kwargs)
        width = batch["input_ids"].shape[1]
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
        raw = [row[width:].tolist() for row in generated.ids]
        cuts = [self.cut_response(o) for o in raw]
        outputs = [o[:n] for o, (n, _) in zip(raw, cuts)]
        metadata = {k: v for k, v in batch.items() if k not in NOT_METADATA}
        logprobs = generated.logprobs
        # a row's kept tokens may run past what the sampler returned only when it has no log-probs
        kept = [logprobs[i, :n] if logprobs is not None and logprobs.shape[1] >= n else None for i, (n, _) in enumerate(cuts)]
        if timer is not None:
            timer.add("generate", start, sum(n for n, _ in cuts))
        return Responses(prompts, outputs, [not ended for _, ended in cuts],
                         [dict(zip(metadata, v)) for v in zip(*metadata.values())] or [{} for _ in prompts], kept,
                         [int(generated.version)] * len(prompts))

    def score_samples(self, samples: Responses, score: Callable[[list[ScoreRow]], list], *, mine: bool = True,
                      append_eos_token: bool = False) -> list:
        """Decode this rank's samples; ``score`` runs once on the main process over every rank's
        rows (one entry per row); this rank's entries come back (every entry with ``mine=False``)."""
        prompts, outputs = samples.prompts, samples.outputs
        texts = self.decode(prompts, [p + o for p, o in zip(prompts, outputs)], append_eos_token=append_eos_token)
        return score_on_main(self.engine, list(zip(*texts, samples.metadata)), score, mine=mine)

    def reward_scores(self, rows: list[ScoreRow]) -> list:
        """The reward function over every rank's rows (on the main process): per row one score,
        or a list of per-token scores."""
        samples, prompts, outputs, metadata = scorer_arguments(rows)
        scores = call_scorer(self.reward_fn, "reward", self.iter_count, samples, prompts, outputs, metadata, self.tokenizer)
        return check_scores(scores, len(rows))

    @staticmethod
    def response_batch(prompts: list[list[int]], outputs: list[list[int]], pad_id: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The engine's ``response`` batch (prompts left-padded, responses right-padded) and the
        (B, R) response mask."""
        query = pad([torch.tensor(p) for p in prompts], pad_id, "left")  # (B, Q)
        response = pad([torch.tensor(o) for o in outputs], pad_id, "right")  # (B, R)
        q_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompts], 0, "left")  # (B, Q)
        r_mask = pad([torch.ones(len(o), dtype=torch.long) for o in outputs], 0, "right")  # (B, R)
        return {"query_tensors": query, "response_tensors": response, "attention_mask": torch.cat([q_mask, r_mask], dim=1)}, r_mask

    def forward_samples(self, samples: Responses, want: tuple[str, ...], timer: PhaseTimer | None = None) -> dict[str, Any]:
        """The engine's no-grad ``response`` forward on the samples."""
        start = clocks()
        batch, _ = self.response_batch(samples.prompts, samples.outputs, self.tokenizer.pad_token_id)
        out = self.engine.forward("response", batch, want=want)
        if timer is not None:
            timer.add("forward", start, int(batch["attention_mask"].sum()))
        return out

    # --- the end of a phase ----------------------------------------------------------------------

    @staticmethod
    def score_stats(scores: torch.Tensor) -> dict[str, float]:
        return {"rollout_scores/mean": scores.mean().item(),
                "rollout_scores/std": scores.std().item() if scores.numel() > 1 else 0.0}

    def finish_phase(self, stats: dict[str, Any], timer: PhaseTimer | None = None) -> None:
        """Log the phase (the main process's rollouts to ``rollout_logging_dir`` when the store
        can export them), write its stats and call the hook."""
        if timer is not None:
            stats.update(timer.stats())
        if self.ahead is not None:
            stats.update(self.ahead.last)  # staleness, and the sampling done beside training
            self.ahead.last = {}
        logging_dir = self.config.train.rollout_logging_dir
        if logging_dir and self.is_main_process and hasattr(self.store, "export_history"):
            os.makedirs(logging_dir, exist_ok=True)
            self.store.export_history(logging_dir)
        self.metrics_log.write(self.iter_count, "rollout", stats)
        self.hooks.rlkit_rollouts_made(trainer=self, step=self.iter_count, num_rollouts=len(self.store), stats=stats,
                                       is_main_process=self.is_main_process)
        self.phase += 1
        if self.ahead is not None:  # the phases after this one, from the policy that starts training it
            self.ahead.plan(self.phase - 1, self.iter_count, self.rollout_chunk, self.config.method.num_rollouts)

    # --- asynchronous rollouts: the loop's generator calls while a job samples ahead -------------

    def sync_generator(self, full: bool = False) -> None:
        """A generator that samples ahead with its own weights keeps each job's policy: it takes
        the weights each job snapshots (:mod:`rlkit_methods.rollouts_ahead`), and every weight
        after a load; evaluation samples with the engine's own sampler meanwhile."""
        ahead = getattr(self, "ahead", None)  # the first sync runs before __init__ sets it
        if ahead is None or not ahead.overlap:
            return super().sync_generator(full)
        if full:
            ahead.drain()
            super().sync_generator(full=True)
        self.evaluation_sampler().update_weights(WeightUpdate(version=self.iter_count, weights=lambda: iter(())))

    def evaluation_sampler(self):
        if self.engine_sampler is None:
            self.engine_sampler = make_generator(self.engine, None)
        return self.engine_sampler

    def sample(self, input_ids, attention_mask=None, *, guidance=None, **kwargs) -> Samples:
        if self.ahead is None or not self.ahead.overlap:
            return super().sample(input_ids, attention_mask, guidance=guidance, **kwargs)
        return self.evaluation_sampler().generate(input_ids, attention_mask, guidance=guidance,
                                                  **self.generation_kwargs(**kwargs))

    def release_generator(self) -> None:
        if self.ahead is None or not self.ahead.running:  # a generator sampling beside training keeps its memory
            super().release_generator()

    def finish_learning(self, failed: bool) -> None:
        if self.ahead is not None:
            self.ahead.close(wait=not failed)

    def rollout_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the rollout schedule: the phases made and, asynchronously,
        the samples of the phases planned ahead (waiting for those under way)."""
        return {"phase": self.phase, "ahead": self.ahead.state() if self.ahead is not None else []}

    def load_rollout_state(self, state: dict[str, Any]) -> None:
        self.phase = state.get("phase", 0)
        if self.ahead is not None:
            self.ahead.close(wait=False)  # what this process planned before the load is not the run's
            self.ahead.load_state(state.get("ahead", []))
