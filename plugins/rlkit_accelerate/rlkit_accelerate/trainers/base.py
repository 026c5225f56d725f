"""``AccelerateRLTrainer``: the engine shared by the PPO, ILQL and SFT trainers.

It owns what is not method math: accelerate, the tokenizer, the optimizer and scheduler,
generation and decoding, evaluation (with trlX's generation sweeps), the training loop with
micro-batching, checkpoints that resume exactly, metrics and the lifecycle hooks. A method's
trainer supplies the model (``setup_model``), its store (``prepare_learning``), its loss
(``loss``) and its callbacks; nothing here branches on the method.

Exact resume: the loop position is ``(epoch, inner epoch, batch)``; each pass over the store
has its own permutation from ``(seed, pass)`` (:mod:`rlkit_methods.loop.batching`), every
evaluation runs in a forked RNG so it never shifts the training random stream, and a
checkpoint holds the model, optimizer, scheduler, RNG states, loop position and the
method's state (including the current store).
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, gather_object, set_seed

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.plugins import get_host
from rlkit_accelerate import assets
from rlkit_methods.loop.batching import pass_batches, split_microbatches
from rlkit_methods.loop.checkpoint import commit_temporary, remove_stale_temporaries, resolve_resume_path, start_temporary, temporary_for
from rlkit_methods.loop.metrics_log import MetricsLog
from rlkit_accelerate.models.adapters import save_base_model
from rlkit_accelerate.optim import make_optimizer, make_scheduler
from rlkit_methods.loop.reporting import print_samples
from rlkit_accelerate.sharding import (
    configure_deepspeed,
    expose_block_classes,
    full_parameters,
    full_state_dict,
    whole_model_construction,
)
from rlkit_methods.data.tokenizers import load_tokenizer


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a dict or dataclass batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if hasattr(batch, "__dataclass_fields__"):
        return type(batch)(**{k: to_device(getattr(batch, k), device) for k in batch.__dataclass_fields__})
    return batch


class AccelerateRLTrainer(ABC):
    """trlX's trainer surface: ``learn``, ``evaluate``, ``generate``, ``generate_eval``,
    ``decode``, ``save``, ``load``, ``save_pretrained``, ``add_eval_pipeline``,
    ``add_prompt_pipeline`` and ``make_experience`` (in the method trainers)."""

    method_name = ""

    def __init__(self, config, reward_fn=None, metric_fn=None, stop_sequences=None, logit_mask=None, **kwargs):
        if kwargs:
            raise ConfigError(f"train.trainer_kwargs: {type(self).__name__} does not accept {', '.join(sorted(kwargs))}")
        self.config = config
        self.reward_fn = reward_fn
        self.metric_fn = metric_fn
        self.stop_sequences = list(stop_sequences or [])
        self.logit_mask = logit_mask
        train = config.train
        self.checkpoint_dir = Path(train.checkpoint_dir)
        self.logging_dir = Path(train.logging_dir) if train.logging_dir else self.checkpoint_dir / "logs"
        if train.tracker and importlib.util.find_spec(train.tracker) is None:
            raise ConfigError(f"train.tracker: {train.tracker} is not installed; pip install {train.tracker}, or set train.tracker: null")
        # accelerate runs several CPU processes (torchrun, gloo) only when told it is on CPU
        multi_cpu = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()
        self.accelerator = Accelerator(log_with=train.tracker, project_dir=str(self.logging_dir), cpu=multi_cpu)
        if train.tracker:
            self.accelerator.init_trackers(train.project_name, config=_flat_config(config.to_dict()))
        set_seed(train.seed)  # before the model: a model built from a config is the same everywhere

        self.tokenizer = load_tokenizer(config.tokenizer, assets.resolve)
        with whole_model_construction(self.accelerator):
            self.model = self.setup_model()
        self.model.to(self.accelerator.device)
        self.opt = make_optimizer(config.optimizer.name, config.optimizer.kwargs, self.model.parameters())
        self.scheduler = make_scheduler(config.scheduler.name, config.scheduler.kwargs, self.opt)
        configure_deepspeed(self.accelerator, train.batch_size, train.minibatch_size, train.max_grad_norm)
        expose_block_classes(self.model)
        self.model, self.opt = self.accelerator.prepare(self.model, self.opt)

        self.generate_kwargs, self.generate_sweep_kwarg = self.generation_settings(config.method.gen_kwargs)
        self.metrics_log = MetricsLog(self.logging_dir, enabled=self.is_main_process, resume=bool(train.resume_from_checkpoint))
        self.eval_pipeline = None
        self.iter_count = 0
        self.nth_evaluation = 0
        self.position = (0, 0, 0)  # (epoch, inner epoch, next batch)
        self.best_score = -math.inf
        self.progress_bar = None  # set while learn() runs; shows the phase

    # --- set-up (method trainers) ------------------------------------------------------------

    @abstractmethod
    def setup_model(self) -> torch.nn.Module:
        """The model to train, with its heads (and reference model)."""

    @abstractmethod
    def prepare_learning(self) -> None:
        """Set ``self.store``, ``self.n_inner_epochs`` and ``self.total_steps``."""

    @abstractmethod
    def loss(self, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """The method's loss on a collated micro-batch, and its statistics."""

    def after_optimizer_step(self) -> None:
        """After every optimizer step (e.g. ILQL's target-Q sync)."""

    def post_backward_callback(self) -> None:
        """After each pass over the store (e.g. PPO's KL controller)."""

    def post_epoch_callback(self) -> None:
        """After each epoch (e.g. PPO's next rollout phase)."""

    def method_state(self) -> dict[str, Any]:
        """What a checkpoint must hold beyond weights and optimizer to resume exactly."""
        return {}

    def load_method_state(self, state: dict[str, Any]) -> None:
        pass

    # --- accessors ---------------------------------------------------------------------------

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def unwrapped_model(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)  # never reach through the DDP wrapper

    @contextmanager
    def generating(self):
        """The unwrapped model, for sampling: in eval mode (no dropout, whoever calls it and
        whenever: after ``learn`` the model is left training) and with whole weights."""
        model = self.unwrapped_model
        was_training = model.training
        model.eval()
        try:
            with self.full_parameters():
                yield model
        finally:
            model.train(was_training)

    def full_parameters(self):
        """Whole weights on every rank while open (ZeRO-3, FSDP), so that generation, which
        runs a different number of forward passes per rank, needs no collectives."""
        return full_parameters(self.model)

    @property
    def hooks(self):
        return get_host().hook

    def add_eval_pipeline(self, eval_pipeline) -> None:
        self.eval_pipeline = eval_pipeline

    # --- generation --------------------------------------------------------------------------

    def generation_settings(self, gen_kwargs: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, list] | None]:
        """trlX: a list-valued generation setting is swept at evaluation (one at most)."""
        kwargs, sweep = {}, None
        for key, value in dict(gen_kwargs).items():
            if isinstance(value, list):
                if sweep is not None:
                    raise ConfigError(f"method.gen_kwargs.{key}: only one setting may be a list (already sweeping {sweep[0]})")
                sweep, value = (key, value), value[0]
            kwargs[key] = value
        kwargs.setdefault("eos_token_id", self.tokenizer.eos_token_id)
        kwargs.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        return kwargs, sweep

    @torch.no_grad()
    def generate(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        """Sample continuations: prompt + new tokens, (B, T + n)."""
        kwargs = {**self.generate_kwargs, **kwargs}
        device = self.accelerator.device
        with self.generating() as model:
            return model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **kwargs)

    def generate_eval(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        return self.generate(input_ids, attention_mask, **kwargs)

    def decode(self, prompts, samples, prompt_sizes=None, append_eos_token: bool = False):
        """trlX's decode: (samples, prompts, outputs) strings; outputs cut at stop sequences."""
        if prompt_sizes is None:
            prompt_sizes = [len(p) for p in prompts]
        str_samples, str_prompts, str_outputs = [], [], []
        for prompt, sample, size in zip(prompts, samples, prompt_sizes):
            str_prompt = self.tokenizer.decode(prompt[:size], skip_special_tokens=True)
            str_output = self.tokenizer.decode(sample[size:], skip_special_tokens=True)
            str_output, trimmed = self.trim_stop_sequences(str_output)
            ended = len(sample) > size and sample[-1] in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id)
            if append_eos_token and (trimmed or ended):
                str_output += self.tokenizer.eos_token
            str_prompts.append(str_prompt)
            str_outputs.append(str_output)
            str_samples.append(str_prompt + str_output)
        return str_samples, str_prompts, str_outputs

    def trim_stop_sequences(self, text: str) -> tuple[str, bool]:
        cut = min((i for i in (text.find(s) for s in self.stop_sequences) if i >= 0), default=-1)
        return (text[:cut].rstrip(), True) if cut >= 0 else (text, False)

    # --- scoring -----------------------------------------------------------------------------

    def score(self, fn_name: str, samples, prompts, outputs, metadata, step: int):
        """Call the reward (or metric) function; a failure names the function and the step."""
        fn = getattr(self, fn_name)
        try:
            return fn(samples=samples, prompts=prompts, outputs=outputs, tokenizer=self.tokenizer, **metadata)
        except Exception as exc:
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise RlkitError(f"{fn_name.replace('_fn', '')} function {name} failed at step {step}: {type(exc).__name__}: {exc}") from exc

    # --- evaluation --------------------------------------------------------------------------

    def eval_batches(self) -> list[list[int]]:
        acc = self.accelerator
        return pass_batches(len(self.eval_pipeline), self.config.train.batch_size, seed=0, pass_index=0,
                            rank=acc.process_index, world_size=acc.num_processes, shuffle=False)

    def evaluate(self) -> dict[str, Any]:
        """Generate for every eval prompt (per sweep value), score on the main process."""
        if self.eval_pipeline is None:
            return {}
        key, values = self.generate_sweep_kwarg or (None, [None])
        stats: dict[str, Any] = {}
        all_rows: list[dict[str, Any]] = []
        if self.progress_bar is not None:
            self.progress_bar.show_phase("eval")
        was_training = self.model.training
        self.model.eval()
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):  # evaluation never shifts the training RNG
            torch.manual_seed(self.config.train.seed)
            for value in values:
                suffix = f"@{key}={value}" if key is not None else ""
                start = time.time()
                with self.full_parameters():
                    rows = self._generate_rows(self.eval_batches(), {key: value} if key is not None else {})
                stats[f"time/generate{suffix}"] = time.time() - start
                sweep_stats, rows = self._score_rows(rows, suffix)
                stats.update(sweep_stats)
                all_rows += [dict(r, **({key: value} if key is not None else {})) for r in rows]
        self.model.train(was_training)
        if self.is_main_process:
            print_samples(all_rows, title=f"Evaluation #{self.nth_evaluation} (step {self.iter_count})", stats=stats)
        self.nth_evaluation += 1
        self.metrics_log.write(self.iter_count, "eval", stats)
        self.metrics_log.write_samples(self.iter_count, all_rows)
        if self.config.train.tracker:
            self.accelerator.log(stats, step=self.iter_count)
        self.hooks.rlkit_evaluation_end(trainer=self, step=self.iter_count, metrics=stats, samples=all_rows,
                                        is_main_process=self.is_main_process)
        return stats

    def _generate_rows(self, batches, extra_kwargs) -> list[dict[str, Any]]:
        pipeline = self.eval_pipeline
        rows = []
        for indices in batches:
            batch = pipeline.collate([pipeline[i] for i in indices])
            samples = self.generate_eval(batch["input_ids"], batch["attention_mask"], **extra_kwargs).cpu()
            width = batch["input_ids"].shape[1]
            for j, index in enumerate(indices):
                prompt = batch["input_ids"][j][batch["attention_mask"][j].bool()].tolist()
                metadata = {k: v[j] for k, v in batch.items() if k not in ("input_ids", "attention_mask", "position_ids")}
                rows.append({"index": index, "prompt_ids": prompt, "output_ids": samples[j, width:].tolist(), "metadata": metadata})
        rows = gather_object(rows) if self.accelerator.num_processes > 1 else rows
        unique = {row["index"]: row for row in rows}  # padded batches repeat a few prompts
        return [unique[i] for i in sorted(unique)]

    def _score_rows(self, rows, suffix: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        stats: dict[str, Any] = {}
        prompts = [r["prompt_ids"] for r in rows]
        samples = [r["prompt_ids"] + r["output_ids"] for r in rows]
        str_samples, str_prompts, str_outputs = self.decode(prompts, samples)
        metadata = {k: [r["metadata"][k] for r in rows] for k in (rows[0]["metadata"] if rows else {})}
        out = [{"prompt": p, "output": o} for p, o in zip(str_prompts, str_outputs)]
        payload = [None]
        if self.is_main_process:
            from rlkit_methods.common.validate import check_scores

            result: dict[str, Any] = {}
            if self.reward_fn is not None:
                rewards = check_scores(self.score("reward_fn", str_samples, str_prompts, str_outputs, metadata, self.iter_count), len(rows))
                result["rewards"] = [float(sum(r)) if isinstance(r, (list, tuple)) else float(r) for r in rewards]
            if self.metric_fn is not None:
                result["metrics"] = self.score("metric_fn", str_samples, str_prompts, str_outputs, metadata, self.iter_count)
            payload = [result]
        if self.accelerator.num_processes > 1:
            broadcast_object_list(payload)
        result = payload[0]
        if "rewards" in result:
            stats[f"reward/mean{suffix}"] = sum(result["rewards"]) / max(len(result["rewards"]), 1)
            for row, reward in zip(out, result["rewards"]):
                row["reward"] = reward
        for name, values in result.get("metrics", {}).items():
            values = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
            stats[f"metrics/{name}{suffix}"] = sum(values) / max(len(values), 1)
            if len(values) == len(out):
                for row, v in zip(out, values):
                    row[name] = v
        return stats, out

    # --- training loop -----------------------------------------------------------------------

    def train_batches(self, epoch: int, inner: int) -> list[list[int]]:
        acc = self.accelerator
        pass_index = epoch * self.n_inner_epochs + inner
        return pass_batches(len(self.store), self.config.train.batch_size, seed=self.config.train.seed,
                            pass_index=pass_index, rank=acc.process_index, world_size=acc.num_processes)

    def collate(self, items):
        return self.store.collate(items)

    def train_step(self, indices: list[int]) -> dict[str, float]:
        """One optimizer step over a batch, in micro-batches with gradient accumulation."""
        self.model.train()  # dropout on while learning (trlX trained in eval mode)
        micro = split_microbatches(indices, self.config.train.minibatch_size)
        stats_sum: dict[str, float] = {}
        forward_time = backward_time = 0.0
        gradient_state = self.accelerator.gradient_state
        for k, mb in enumerate(micro):
            batch = to_device(self.collate([self.store[i] for i in mb]), self.accelerator.device)
            last = k == len(micro) - 1
            # DeepSpeed steps its engine inside backward whenever gradients sync: only the last
            gradient_state._set_sync_gradients(last)
            sync = nullcontext() if last else self.accelerator.no_sync(self.model)
            with sync:
                start = time.time()
                loss, stats = self.loss(batch)
                forward_time += time.time() - start
                start = time.time()
                self.accelerator.backward(loss * len(mb) / len(indices))
                backward_time += time.time() - start
            for name, value in stats.items():
                stats_sum[name] = stats_sum.get(name, 0.0) + float(value) * len(mb) / len(indices)
        if self.config.train.max_grad_norm:
            norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.train.max_grad_norm)
            if norm is not None:  # DeepSpeed clips inside its step and may not report the norm
                stats_sum["policy/grad_norm"] = float(norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.scheduler.step()
        stats_sum["time/forward"] = forward_time
        stats_sum["time/backward"] = backward_time
        for group, lr in enumerate(self.scheduler.get_last_lr()):
            stats_sum[f"learning_rate_group_{group}"] = lr
        return stats_sum

    def learn(self) -> dict[str, Any]:
        """Train until ``total_steps``; evaluate, checkpoint and log on the configured intervals."""
        self.prepare_learning()
        train = self.config.train
        resume = train.resume_from_checkpoint
        results: dict[str, Any] = {}
        if resume:
            self.load(resolve_resume_path(resume))
            self.metrics_log.truncate_after(self.iter_count)
        else:
            results = self.evaluate()
        from rlkit_methods.loop.reporting import progress

        with progress(self.total_steps, self.iter_count, enabled=self.is_main_process) as bar:
            self.progress_bar = bar
            start_epoch, start_inner, start_batch = self.position
            for epoch in range(start_epoch, train.epochs):
                for inner in range(start_inner if epoch == start_epoch else 0, self.n_inner_epochs):
                    batches = self.train_batches(epoch, inner)
                    first = start_batch if (epoch, inner) == (start_epoch, start_inner) else 0
                    for b in range(first, len(batches)):
                        stats = self.train_step(batches[b])
                        self.iter_count += 1
                        self.after_optimizer_step()
                        self.position = (epoch, inner, b + 1)
                        results = self.after_step(stats)
                        bar.update(self.iter_count, stats)
                        if self.iter_count >= self.total_steps:
                            return results
                    self.post_backward_callback()
                self.post_epoch_callback()
                self.position = (epoch + 1, 0, 0)
        return results

    def after_step(self, stats: dict[str, Any]) -> dict[str, Any]:
        train = self.config.train
        last = self.iter_count >= self.total_steps
        if self.iter_count % train.checkpoint_interval == 0 or last:
            self.save()
        results = {}
        if self.iter_count % train.eval_interval == 0 or last:
            results = self.evaluate()
            stats.update(results)
            score = results.get("reward/mean", results.get("metrics/reward", -math.inf))
            if train.save_best and score > self.best_score:
                self.best_score = score
                self.save(self.checkpoint_dir / "best_checkpoint")
        self.metrics_log.write(self.iter_count, "train", {k: v for k, v in stats.items() if k not in results})
        if train.tracker:
            self.accelerator.log(stats, step=self.iter_count)
        self.hooks.rlkit_step_end(trainer=self, step=self.iter_count, metrics=stats, is_main_process=self.is_main_process)
        return results

    # --- checkpoints -------------------------------------------------------------------------

    def save_pretrained(self, directory: str | os.PathLike | None = None, merge_adapters: bool = False, **kwargs) -> None:
        """An HF model folder (plus head weights) and the tokenizer, loadable by transformers.

        With PEFT adapters it holds the adapter (load it with peft on the base model), or with
        ``merge_adapters=True`` one merged model for plain ``AutoModelForCausalLM``."""
        directory = Path(directory or self.checkpoint_dir / "hf_model")
        self.accelerator.wait_for_everyone()
        self._export(directory, merge_adapters, **kwargs)
        self.accelerator.wait_for_everyone()

    def _export(self, directory: Path, merge_adapters: bool = False, **kwargs) -> None:
        """Written by the main process; every rank calls it (a sharded model is gathered first)."""
        state = full_state_dict(self.model)  # None unless sharded
        if not self.is_main_process:
            return
        model = self.unwrapped_model
        if getattr(model, "heads_file", None):  # a wrapper with rlkit heads
            model.save_pretrained(directory, merge_adapters=merge_adapters, state_dict=state, **kwargs)
        else:
            save_base_model(model, directory, merge_adapters, state, **kwargs)
        self.tokenizer.save_pretrained(directory)

    def save(self, directory: str | os.PathLike | None = None) -> Path:
        """The full training state, written atomically (temporary folder, then rename)."""
        acc = self.accelerator
        directory = Path(directory or self.checkpoint_dir / f"checkpoint_{self.iter_count}")
        if self.is_main_process:
            remove_stale_temporaries(directory.parent)
            start_temporary(directory)
        acc.wait_for_everyone()
        tmp = temporary_for(directory)
        acc.save_state(str(tmp / "accelerate"), safe_serialization=False)
        state = {
            "iter_count": self.iter_count,
            "nth_evaluation": self.nth_evaluation,
            "position": self.position,
            "best_score": self.best_score,
            "scheduler": self.scheduler.state_dict(),
            "method": self.method_state(),
        }
        torch.save(state, tmp / f"trainer_state_{acc.process_index}.pt")
        if self.is_main_process:
            self.config.save_yaml(tmp / "config.yml")
        self._export(tmp / "hf_model")
        acc.wait_for_everyone()
        if self.is_main_process:
            commit_temporary(directory)
        acc.wait_for_everyone()
        self.hooks.rlkit_checkpoint_saved(trainer=self, step=self.iter_count, path=directory, is_main_process=self.is_main_process)
        return directory

    def load(self, directory: str | os.PathLike) -> None:
        """Restore what ``save`` wrote; training continues exactly where it stopped."""
        directory = Path(directory)
        self.accelerator.load_state(str(directory / "accelerate"))
        state = torch.load(directory / f"trainer_state_{self.accelerator.process_index}.pt", weights_only=False)
        self.iter_count = state["iter_count"]
        self.nth_evaluation = state["nth_evaluation"]
        self.position = tuple(state["position"])
        self.best_score = state["best_score"]
        self.scheduler.load_state_dict(state["scheduler"])
        self.load_method_state(state["method"])


def _flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat_config(value, name + "."))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[name] = value
        else:
            out[name] = str(value)
    return out
