"""Evaluation and scoring, shared by every method and engine.

trlX's sweep: a list-valued generation setting (``gen_kwargs.beta: [0, 1, 100]``) is
evaluated once per value, each metric suffixed ``@beta=1``. Every data-parallel rank
generates for its share of the eval prompts; the rows are gathered, the reward and metric
functions run once per sample on the main process, and the results reach every rank.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from rlkit_core.errors import ConfigError, RlkitError

from rlkit_methods.common.scoring import call_scorer, score_on_main, scorer_arguments
from rlkit_methods.loop.batching import eval_batches
from rlkit_methods.run.console import print_samples

NOT_METADATA = ("input_ids", "attention_mask", "position_ids")


def generation_settings(gen_kwargs: dict[str, Any], tokenizer) -> tuple[dict[str, Any], tuple[str, list] | None]:
    """(settings with the first value of a swept one, (swept key, values) or None)."""
    kwargs, sweep = {}, None
    for key, value in dict(gen_kwargs).items():
        if isinstance(value, list):
            if sweep is not None:
                raise ConfigError(f"method.gen_kwargs.{key}: only one setting may be a list (already sweeping {sweep[0]})")
            sweep, value = (key, value), value[0]
        kwargs[key] = value
    kwargs.setdefault("eos_token_id", tokenizer.eos_token_id)
    kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
    return kwargs, sweep


def generate_rows(trainer, extra_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """Generate for this rank's eval prompts; every rank gets all rows, in prompt order."""
    pipeline, engine = trainer.eval_pipeline, trainer.engine
    batches = eval_batches(len(pipeline), trainer.eval_batch_size, rank=engine.process_index, world_size=engine.num_processes)
    rows = []
    for indices in batches:
        batch = pipeline.collate([pipeline[i] for i in indices])
        samples = trainer.generate_eval(batch["input_ids"], batch["attention_mask"], **extra_kwargs)
        width = batch["input_ids"].shape[1]
        for j, index in enumerate(indices):
            prompt = batch["input_ids"][j][batch["attention_mask"][j].bool()].tolist()
            metadata = {k: v[j] for k, v in batch.items() if k not in NOT_METADATA}
            rows.append({"index": index, "prompt_ids": prompt, "output_ids": samples[j, width:].tolist(), "metadata": metadata})
    rows = [row for part in engine.gather_object(rows) for row in part]
    unique = {row["index"]: row for row in rows}  # padded batches repeat a few prompts
    return [unique[i] for i in sorted(unique)]


def score_rows(trainer, rows: list[dict[str, Any]], suffix: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Decode, score on the main process, and return (stats, sample dicts) on every rank."""
    from rlkit_methods.common.validate import check_scores

    stats: dict[str, Any] = {}
    prompts = [r["prompt_ids"] for r in rows]
    str_samples, str_prompts, str_outputs = trainer.decode(prompts, [r["prompt_ids"] + r["output_ids"] for r in rows])
    out = [{"prompt": p, "output": o} for p, o in zip(str_prompts, str_outputs)]

    def score(flat) -> dict[str, Any]:
        result: dict[str, Any] = {}
        args = (*scorer_arguments(flat), trainer.tokenizer)
        if trainer.reward_fn is not None:
            rewards = check_scores(call_scorer(trainer.reward_fn, "reward", trainer.iter_count, *args), len(rows))
            result["rewards"] = [float(sum(r)) if isinstance(r, (list, tuple)) else float(r) for r in rewards]
        if trainer.metric_fn is not None:
            result["metrics"] = check_metrics(call_scorer(trainer.metric_fn, "metric", trainer.iter_count, *args),
                                              trainer.metric_fn, len(rows))
        return result

    # every rank holds every row already (generate_rows gathered them)
    texts = list(zip(str_samples, str_prompts, str_outputs, [r["metadata"] for r in rows]))
    result = score_on_main(trainer.engine, texts, score, gathered=True)
    if "rewards" in result:
        stats[f"reward/mean{suffix}"] = sum(result["rewards"]) / max(len(result["rewards"]), 1)
        for row, reward in zip(out, result["rewards"]):
            row["reward"] = reward
    for name, values in result.get("metrics", {}).items():
        stats[f"metrics/{name}{suffix}"] = sum(values) / max(len(values), 1)
        if len(values) == len(out):
            for row, v in zip(out, values):
                row[name] = v
    return stats, out


def check_metrics(metrics: Any, fn: Callable, n: int) -> dict[str, list[float]]:
    """trlX's metric contract: a dict of name -> one number per sample (or one number)."""
    name = getattr(fn, "__qualname__", type(fn).__name__)
    if not isinstance(metrics, dict):
        raise RlkitError(f"metric function {name} returned {type(metrics).__name__}; return a dict of name -> list of numbers")
    out = {}
    for key, values in metrics.items():
        values = values if isinstance(values, (list, tuple)) else [values]
        try:
            values = [float(v) for v in values]
        except (TypeError, ValueError):
            raise RlkitError(f"metric function {name}: metric {key!r} holds non-numbers; return numbers") from None
        if len(values) not in (1, n):
            raise RlkitError(f"metric function {name}: metric {key!r} has {len(values)} values for {n} samples; return one per sample")
        out[key] = values
    return out


def best_score(stats: dict[str, Any]) -> float:
    """What ``train.save_best`` compares: the mean reward, else ``metrics/reward``."""
    score = stats.get("reward/mean", stats.get("metrics/reward", -math.inf))
    return score if isinstance(score, (int, float)) and math.isfinite(score) else -math.inf


def evaluate(trainer) -> dict[str, Any]:
    """The loop's evaluation: generate for every eval prompt (per sweep value, each from the same
    random state, in a forked RNG), score on the main process, log, print and call the hook."""
    if trainer.eval_pipeline is None:
        return {}
    key, values = trainer.generate_sweep_kwarg or (None, [None])
    stats: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    if trainer.progress_bar is not None:
        trainer.progress_bar.show_phase("eval", trainer.iter_count)
    start_all = time.time()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):  # evaluation never shifts the training RNG
        for value in values:
            # every sweep value from the same random state (common random numbers): equal
            # policies give equal samples, so the values differ by their setting alone
            torch.manual_seed(trainer.config.train.seed + trainer.engine.process_index)
            extra = {key: value} if key is not None else {}
            suffix = f"@{key}={value}" if key is not None else ""
            start, cpu = time.time(), time.process_time()
            rows = generate_rows(trainer, extra)
            stats[f"time/generate{suffix}"] = time.time() - start
            stats[f"cpu/generate{suffix}"] = time.process_time() - cpu
            sweep_stats, rows = score_rows(trainer, rows, suffix)
            stats.update(sweep_stats)
            all_rows += [dict(r, **extra) for r in rows]
    stats["time/evaluate"] = time.time() - start_all
    if trainer.is_main_process:
        print_samples(all_rows, title=f"Evaluation #{trainer.nth_evaluation} (step {trainer.iter_count})", stats=stats)
    return record_evaluation(trainer, stats, all_rows)


def record_evaluation(trainer, stats: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An evaluation's end, whatever evaluated: counted, its stats and sample rows written to the
    metrics log and the tracker, the ``rlkit_evaluation_end`` hook called."""
    trainer.nth_evaluation += 1
    trainer.metrics_log.write(trainer.iter_count, "eval", stats)
    trainer.metrics_log.write_samples(trainer.iter_count, rows)
    trainer.tracker.log(stats, trainer.iter_count)
    trainer.hooks.rlkit_evaluation_end(trainer=trainer, step=trainer.iter_count, metrics=stats, samples=rows,
                                       is_main_process=trainer.is_main_process)
    return stats
