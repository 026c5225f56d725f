"""``RLTrainer``: the loop every method shares, on any engine (``rlkit_core.engine``).

It owns what is neither method math nor hardware: trlX's trainer surface (``learn``,
``evaluate``, ``generate``, ``decode``, ``save``, ``load``, ``save_pretrained``, the
pipelines), intervals, evaluation with trlX's sweeps, the best checkpoint, the JSONL metrics
and trackers, the progress display, the lifecycle hooks, atomic checkpoints with
``config.yml`` and exact resume. A method's trainer supplies its model spec, store, forward
kind and loss, and its callbacks; nothing here branches on the method or the engine.

Exact resume: the loop position is ``(epoch, inner epoch, batch)``; each pass over the store
has its own permutation from ``(seed, pass)`` (:mod:`.batching`), every evaluation runs in a
forked RNG so it never shifts the training stream, and a checkpoint holds the engine's state
(weights, optimizer, scheduler), each rank's RNG, the position and the method's state.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import Samples, WeightUpdate, make_generator, named_weights
from rlkit_core.plugins import get_host

from rlkit_methods.loop import evaluation
from rlkit_methods.loop.batching import pass_batches
from rlkit_methods.rollouts_ahead import refuse_async_rollouts
from rlkit_methods.run.checkpoint import (
    RLKIT_MARKER,
    commit_temporary,
    is_complete,
    read_errors,
    remove_stale_temporaries,
    resolve_resume_path,
    start_temporary,
    temporary_for,
    write_errors,
)
from rlkit_methods.run.divergence import stop_if_diverged
from rlkit_methods.run.metrics_log import MetricsLog
from rlkit_methods.run.console import BeforeLearn, describe_model, progress
from rlkit_methods.run.resume import check_resume_config, finished_message, steps_left
from rlkit_methods.run.rotation import rotate_checkpoints
from rlkit_methods.run.rundir import claim
from rlkit_methods.run.signals import stop_on_signals
from rlkit_methods.run.state import read_state, rng_state, set_rng_state, write_state
from rlkit_methods.run.tracking import Tracker

log = logging.getLogger(__name__)


class RLTrainer:
    method_name = ""
    engine_class: Any = None  # set by a pairing such as AcceleratePPOTrainer
    forward_kind = "tokens"
    shard_store = True  # offline stores are split over data-parallel ranks; rollouts are per rank
    # why the method cannot learn from rollouts of an older policy (train.async_rollouts); None: it can
    on_policy_only: str | None = "it makes no rollouts"

    def __init__(self, config, reward_fn=None, metric_fn=None, stop_sequences=None, logit_mask=None, *,
                 engine: Any = None, **engine_kwargs):
        self.config = config
        refuse_async_rollouts(self, config)
        self.reward_fn, self.metric_fn = reward_fn, metric_fn
        self.stop_sequences = list(stop_sequences or [])
        self.logit_mask = logit_mask
        engine = engine if engine is not None else self.engine_class
        if engine is None:
            raise ConfigError(f"train.trainer: {type(self).__name__} has no engine; pair it with a backend (e.g. train.backend: accelerate)")
        self.engine = engine(config, **engine_kwargs) if isinstance(engine, type) else engine
        train = config.train
        self.checkpoint_dir = Path(train.checkpoint_dir)
        self.logging_dir = Path(train.logging_dir) if train.logging_dir else self.checkpoint_dir / "logs"
        # the folder first: a used one is refused before a model loads (seconds, not minutes);
        # a config the engine then refuses leaves no folder behind
        self.run_dir = self.claim_run_dir()
        if self.is_main_process:  # a first run converts or loads a model for a while: say so
            log.info("%s (%s) ...", describe_model(config.model.model_path), type(self.engine).__name__)
        try:
            self.engine.build(self.model_spec())
        except BaseException:
            self.run_dir.discard()
            raise
        self.tracker = Tracker(config, self.logging_dir, enabled=self.is_main_process)
        self.generate_kwargs, self.generate_sweep_kwarg = evaluation.generation_settings(config.method.gen_kwargs, self.tokenizer)
        self.metrics_log = MetricsLog(self.logging_dir, enabled=self.is_main_process, resume=bool(train.resume_from_checkpoint))
        self.eval_pipeline = None
        self.eval_batch_size = train.batch_size
        self.iter_count = 0
        self.nth_evaluation = 0
        self.position = (0, 0, 0)  # (epoch, inner epoch, next batch)
        self.best_score = -math.inf
        self.progress_bar = BeforeLearn(self.is_main_process)  # the bar while learn() runs; shows the phase
        self.sync_seconds = 0.0  # every weight sync's of this process (generator/sync_s_sum)
        self.generator = make_generator(self.engine, train.generator, train.generator_kwargs)
        self.sync_generator(full=True)

    def claim_run_dir(self):
        """Lock the checkpoint folder for this run; another run's files there are refused in
        one line (resume, a new folder, or train.overwrite_checkpoint_dir), on every rank."""
        train, problem, run_dir = self.config.train, None, None
        try:
            run_dir = claim(self.checkpoint_dir, resume=train.resume_from_checkpoint, overwrite=train.overwrite_checkpoint_dir,
                            is_main_process=self.is_main_process, logging_dir=self.logging_dir)
        except RlkitError as exc:
            problem = exc
        problem = self.engine.broadcast_object(problem)  # every rank raises the main process's refusal
        if problem is not None:
            raise problem
        return run_dir

    # --- what a method supplies ---------------------------------------------------------------

    def model_spec(self) -> ModelSpec:
        raise NotImplementedError(f"{type(self).__name__}.model_spec")

    def prepare_learning(self) -> None:
        """Set ``self.store``, ``self.n_inner_epochs`` and ``self.total_steps``."""
        raise NotImplementedError(f"{type(self).__name__}.prepare_learning")

    def loss(self, outputs: dict[str, Any], batch) -> tuple[torch.Tensor, dict[str, float]]:
        """The method's loss from the engine's ``forward_kind`` outputs on a micro-batch."""
        raise NotImplementedError(f"{type(self).__name__}.loss")

    def collate(self, items):
        return self.store.collate(items)

    def after_optimizer_step(self) -> None:
        """After every optimizer step (e.g. ILQL's target-Q sync)."""

    def post_backward_callback(self) -> None:
        """After each pass over the store (trlX's name)."""

    def post_epoch_callback(self) -> None:
        """After each epoch (e.g. PPO's KL controller and next rollout phase)."""

    def method_state(self) -> dict[str, Any]:
        """What a checkpoint must hold beyond the engine's state to resume exactly (plain
        containers of tensors and numbers)."""
        return {}

    def load_method_state(self, state: dict[str, Any]) -> None:
        pass

    # --- accessors ---------------------------------------------------------------------------

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def is_main_process(self) -> bool:
        return self.engine.is_main_process

    def __getattr__(self, name: str):
        # trlX's trainers exposed their backend (``trainer.accelerator``, ``trainer.model``):
        # what the loop does not define is the engine's
        engine = self.__dict__.get("engine")
        if engine is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(engine, name)

    @property
    def hooks(self):
        return get_host().hook

    def add_eval_pipeline(self, eval_pipeline) -> None:
        self.eval_pipeline = eval_pipeline

    # --- generation ----------------------------------------------------------------------------

    def generation_kwargs(self, **overrides) -> dict[str, Any]:
        return {**self.generate_kwargs, **overrides}

    def generate(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        """Sample continuations: prompt + new tokens, (B, T + n), on the CPU (trlX's)."""
        return self.sample(input_ids, attention_mask, **kwargs).ids

    def sample(self, input_ids, attention_mask=None, *, guidance=None, **kwargs) -> Samples:
        """The generator's ids, log-probs and policy version, ``kwargs`` over ``gen_kwargs``."""
        return self.generator.generate(input_ids, attention_mask, guidance=guidance, **self.generation_kwargs(**kwargs))

    def sync_generator(self, full: bool = False) -> dict[str, float]:
        """Offer the generator this step's policy (``full``: every weight, else what the optimizer
        changes); on every rank after every step and load (rlkit_core/generator.py). Returns its
        time: ``generator/sync_s`` (this sync: the weights gathered, sent and loaded; ~0 for a
        generator on the engine's weights) and ``generator/sync_s_sum`` (every sync since start)."""
        engine = self.engine
        start = time.perf_counter()
        self.generator.update_weights(WeightUpdate(
            version=self.iter_count, full=full, weights=lambda: named_weights(engine, trainable_only=not full)))
        seconds = time.perf_counter() - start
        self.sync_seconds += seconds
        return {"generator/sync_s": seconds, "generator/sync_s_sum": self.sync_seconds}

    def release_generator(self) -> None:
        self.generator.release()

    def finish_learning(self, failed: bool) -> None:
        """When ``learn`` ends (``failed``: with an error), before the run folder is released."""

    def generate_eval(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        return self.generate(input_ids, attention_mask, **kwargs)

    def decode(self, prompts, samples, prompt_sizes=None, append_eos_token: bool = False):
        """trlX's decode: (samples, prompts, outputs) strings; outputs cut at stop sequences."""
        tok = self.tokenizer
        if prompt_sizes is None:
            prompt_sizes = [len(p) for p in prompts]
        str_samples, str_prompts, str_outputs = [], [], []
        for prompt, sample, size in zip(prompts, samples, prompt_sizes):
            str_prompt = tok.decode(prompt[:size], skip_special_tokens=True)
            str_output, trimmed = self.trim_stop_sequences(tok.decode(sample[size:], skip_special_tokens=True))
            ended = len(sample) > size and sample[-1] in (tok.eos_token_id, tok.pad_token_id)
            if append_eos_token and (trimmed or ended):
                str_output += tok.eos_token
            str_prompts.append(str_prompt)
            str_outputs.append(str_output)
            str_samples.append(str_prompt + str_output)
        return str_samples, str_prompts, str_outputs

    def trim_stop_sequences(self, text: str) -> tuple[str, bool]:
        cut = min((i for i in (text.find(s) for s in self.stop_sequences) if i >= 0), default=-1)
        return (text[:cut].rstrip(), True) if cut >= 0 else (text, False)

    # --- evaluation ----------------------------------------------------------------------------

    def evaluate(self) -> dict[str, Any]:
        """Generate for every eval prompt (per sweep value), score on the main process."""
        return evaluation.evaluate(self)

    # --- training loop -------------------------------------------------------------------------

    def train_batches(self, epoch: int, inner: int) -> list[list[int]]:
        """This rank's batches (store indices) of one pass, from the pass's own permutation."""
        engine = self.engine
        rank, world = (engine.process_index, engine.num_processes) if self.shard_store else (0, 1)
        return pass_batches(len(self.store), engine.batch_sizes()[0], seed=self.config.train.seed,
                            pass_index=epoch * self.n_inner_epochs + inner, rank=rank, world_size=world)

    def steps_per_pass(self) -> int:
        per_step = self.engine.batch_sizes()[0] * (self.engine.num_processes if self.shard_store else 1)
        return math.ceil(len(self.store) / per_step) if len(self.store) else 0

    def train_step(self, indices: list[int]) -> dict[str, float]:
        """One optimizer step over a batch of store indices."""
        return self.engine.step(self.forward_kind, [self.store[i] for i in indices], self.collate, self.loss)

    def learn(self, log_fn: Callable | None = None, save_fn: Callable | None = None, eval_fn: Callable | None = None) -> dict[str, Any]:
        """Train until ``total_steps``; evaluate, checkpoint and log on the configured intervals.
        trlX's callbacks: ``log_fn(stats)`` after every step, ``save_fn(trainer)`` after every
        checkpoint, ``eval_fn(trainer)`` after every evaluation (its dict joins the stats)."""
        self.callbacks = {"log": log_fn, "save": save_fn, "eval": eval_fn}
        self.prepare_learning()
        train = self.config.train
        results: dict[str, Any] = {}
        failed = True
        try:
            if train.resume_from_checkpoint:
                path = resolve_resume_path(train.resume_from_checkpoint)
                check_resume_config(path, self.config)
                self.load(path)
                self.metrics_log.truncate_after(self.iter_count)
                if not steps_left(self.iter_count, self.total_steps) and self.is_main_process:
                    log.warning(finished_message(path, self.iter_count, self.total_steps))
            else:
                results = self.evaluate_with_callback()
            shown = progress(self.total_steps, self.iter_count, enabled=self.is_main_process, stats=results)
            with stop_on_signals() as self.stop, shown as bar:  # the first line shows evaluation 0's reward
                self.progress_bar = bar
                results = self._loop(bar) or results
            failed = False
            return results
        finally:
            self.finish_learning(failed)
            self.progress_bar = BeforeLearn(self.is_main_process)
            self.tracker.finish()
            self.run_dir.release()

    def _loop(self, bar) -> dict[str, Any] | None:
        results = None
        start_epoch, start_inner, start_batch = self.position
        for epoch in range(start_epoch, self.config.train.epochs):
            for inner in range(start_inner if epoch == start_epoch else 0, self.n_inner_epochs):
                batches = self.train_batches(epoch, inner)
                first = start_batch if (epoch, inner) == (start_epoch, start_inner) else 0
                for b in range(first, len(batches)):
                    if self.iter_count >= self.total_steps:
                        return results
                    self.release_generator()  # training's turn for the memory (idempotent)
                    stats = self.train_step(batches[b])
                    self.iter_count += 1
                    stop_if_diverged(self, stats)
                    self.after_optimizer_step()
                    stats.update(self.sync_generator() or {})  # an override that syncs later times nothing here
                    self.position = (epoch, inner, b + 1)
                    results = self.after_step(stats)
                    bar.update(self.iter_count, stats)
                    self.stop_if_asked()
                    if self.iter_count >= self.total_steps:
                        return results
                self.post_backward_callback()
            self.post_epoch_callback()
            self.position = (epoch + 1, 0, 0)
        return results

    def stop_if_asked(self) -> None:
        """After a SIGINT/SIGTERM on any rank: every rank stops at this step, with a checkpoint."""
        asked = self.engine.all_reduce_sum(torch.tensor([float(self.stop.requested)]))
        if float(asked[0]) > 0:
            saved = self.checkpoint_dir / f"checkpoint_{self.iter_count}"
            raise self.stop.error(self.iter_count, saved if is_complete(saved) else self.save())

    def evaluate_with_callback(self) -> dict[str, Any]:
        results = self.evaluate()
        eval_fn = getattr(self, "callbacks", {}).get("eval")
        if eval_fn is not None:
            results.update(eval_fn(self) or {})
        return results

    def after_step(self, stats: dict[str, Any]) -> dict[str, Any]:
        """Evaluate, log the step, then checkpoint it: the checkpoint of step N is written after
        step N's records, so a run killed before it resumes from the one before (whose resume
        drops records past it) and a run killed after it lacks nothing of step N (saved first,
        a kill during the evaluation lost step N's records for good)."""
        train = self.config.train
        last = self.iter_count >= self.total_steps
        results = {}
        if self.iter_count % train.eval_interval == 0 or last:
            results = self.evaluate_with_callback()
            stats.update(results)
            score = evaluation.best_score(results)
            if train.save_best and score > self.best_score:
                self.best_score = score
                self.save(self.checkpoint_dir / "best_checkpoint")
        train_stats = {k: v for k, v in stats.items() if k not in results}  # evaluate() logged the rest
        self.metrics_log.write(self.iter_count, "train", train_stats)
        self.tracker.log(train_stats, self.iter_count)
        if self.iter_count % train.checkpoint_interval == 0 or last:
            self.save()
        if last:  # the final model at one path whatever total_steps was: <checkpoint_dir>/hf_model
            self.save_pretrained()
        self.hooks.rlkit_step_end(trainer=self, step=self.iter_count, metrics=stats, is_main_process=self.is_main_process)
        log_fn = self.callbacks.get("log") if hasattr(self, "callbacks") else None
        if log_fn is not None:
            log_fn(stats)
        return results

    # --- checkpoints ---------------------------------------------------------------------------

    def save_pretrained(self, directory: str | os.PathLike | None = None, merge_adapters: bool = False, **kwargs) -> None:
        """An HF model folder (plus head weights) and the tokenizer, loadable by transformers.
        With PEFT adapters it holds the adapter, or with ``merge_adapters=True`` one merged model."""
        directory = Path(directory or self.checkpoint_dir / "hf_model")
        self.engine.export(directory, merge_adapters=merge_adapters, **kwargs)
        if self.is_main_process and directory == self.checkpoint_dir / "hf_model":
            (directory / RLKIT_MARKER).touch()  # the run's own: train.overwrite_checkpoint_dir may replace it

    def save(self, directory: str | os.PathLike | None = None) -> Path:
        """The full training state, written atomically (temporary folder, then rename)."""
        engine = self.engine
        directory = Path(directory or self.checkpoint_dir / f"checkpoint_{self.iter_count}")
        if self.is_main_process:
            remove_stale_temporaries(directory.parent)
            start_temporary(directory)
        engine.barrier()
        tmp = temporary_for(directory)
        with write_errors(directory):
            engine.save_state(tmp)
            state = {
                "iter_count": self.iter_count,
                "nth_evaluation": self.nth_evaluation,
                "position": list(self.position),
                "best_score": self.best_score,
                "rng": rng_state(),
                "method": self.method_state(),
            }
            if engine.writes_rank_state:  # ranks of one TP/PP replica share one file
                write_state(tmp / f"loop_state_{engine.process_index}.pt", state)
            if self.is_main_process:
                self.config.save_yaml(tmp / "config.yml")
        engine.barrier()
        if self.is_main_process:
            commit_temporary(directory)
            limit = self.config.train.save_total_limit
            if limit and directory.parent == self.checkpoint_dir and directory.name.startswith("checkpoint_"):
                rotate_checkpoints(self.checkpoint_dir, limit)
        engine.barrier()
        self.hooks.rlkit_checkpoint_saved(trainer=self, step=self.iter_count, path=directory, is_main_process=self.is_main_process)
        save_fn = getattr(self, "callbacks", {}).get("save")
        if save_fn is not None:
            save_fn(self)
        return directory

    def load(self, directory: str | os.PathLike) -> None:
        """Restore what ``save`` wrote; training continues exactly where it stopped."""
        directory = Path(directory)
        with read_errors(directory):
            self.engine.load_state(directory)
            state = read_state(directory / f"loop_state_{self.engine.process_index}.pt")
        self.iter_count = state["iter_count"]
        self.nth_evaluation = state["nth_evaluation"]
        self.position = tuple(state["position"])
        self.best_score = state["best_score"]
        set_rng_state(state["rng"])
        self.load_method_state(state["method"])
        self.sync_generator(full=True)
