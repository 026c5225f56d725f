"""The randomwalks cases against trlX 0.7 (``ilql``, ``sft``, ``walks-ppo``): what both sides
run, from one source.

Both sides read the same example YAML (``examples/randomwalks/{method}_randomwalks.yml``,
made to match trlX's ``examples/randomwalks`` settings) with the same overrides. rlkit runs it
through ``rlkit run``'s path; the trlX worker turns it into trlX's config dict
(``trlx_config``): rlkit-only keys are dropped and listed in the result, the model config dict
becomes a ``GPT2Config``, and ``tokenizer_path: randomwalks`` becomes a folder holding the same
23-token vocabulary (``vocab`` in the spec, from rlkit's tokenizer), built with the peer's own
``tokenizers``. Stdlib and PyYAML only: the runner and both venvs import it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "randomwalks"
METHODS = {"ilql": "ilql_randomwalks.yml", "sft": "sft_randomwalks.yml", "walks-ppo": "ppo_randomwalks.yml"}
EVAL_REPEATS = 50  # 20 start letters x 50 = 1000 post-training samples per side (and per beta)
TASK_SEED = 1000  # the graph and walks of trlX's example (it passes train.seed, default 1000)
TASK_SECTIONS = ("data.samples", "data.prompts", "data.eval_prompts", "reward", "metric")  # rlkit's randomwalks parts
RLKIT_ONLY = ("data", "metric", "reward", "plugins")  # sections trlX's TRLConfig does not have


def example_config(case: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((EXAMPLES / METHODS[case]).read_text())


def set_dotted(config: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(c, "train.total_steps", 10)``; a missing section or key is an error (a
    misspelled override must not be ignored on one side only)."""
    *path, last = key.split(".")
    node = config
    for part in path:
        if not isinstance(node.get(part), dict):
            raise KeyError(f"override {key}: no section {part!r}")
        node = node[part]
    node[last] = value


def apply_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        set_dotted(config, key, value)
    return config


def task_seed(walks_spec: dict[str, Any]) -> int:
    """The seed of the graph and walks both sides train and evaluate on (``--walks-task-seed``).

    trlX's example draws its graph from ``train.seed``; the bench keeps the graph fixed apart
    from it, so ``--walks-set train.seed=S`` varies the training alone (initial weights, data
    order, sampling) and every seed learns the same task (seeds 1001 and 1003 draw graphs
    with no path to the goal: every reward 0)."""
    seed = walks_spec.get("task_seed")
    return TASK_SEED if seed is None else int(seed)


def rlkit_task_overrides(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """rlkit's overrides that put every randomwalks source, reward and metric of the example
    ``config`` on the graph of ``seed`` (each takes ``seed`` among its kwargs)."""
    out = {}
    for dotted in TASK_SECTIONS:
        node: Any = config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):  # {pipeline: ...} / {name: ...}; a string is the shorthand
            node = node.get("pipeline") or node.get("name")
        name = node if isinstance(node, str) else None
        if name and str(name).startswith("randomwalks"):
            out[f"{dotted}.kwargs.seed"] = seed
    return out


def trlx_config(config: dict[str, Any], fields: dict[str, set[str]], tokenizer_folder: str) -> tuple[dict[str, Any], list[str]]:
    """rlkit's example dict -> trlX's ``TRLConfig.from_dict`` input, and the dropped keys.

    ``fields``: the keys each trlX section accepts (``train``, ``model``, ...; ``method`` by the
    method's dataclass). ``tokenizer_path: randomwalks`` points at ``tokenizer_folder``; trlX's
    tracker is off (rlkit logs to a local JSONL file that trlX has no equivalent of) and
    ``train.pipeline`` is trlX's examples' ``PromptPipeline`` (rlkit's default)."""
    out: dict[str, Any] = {}
    dropped = [section for section in config if section in RLKIT_ONLY]
    for section, values in config.items():
        if section in RLKIT_ONLY:
            continue
        if section not in fields:
            dropped.append(section)
            continue
        out[section] = {k: v for k, v in values.items() if k in fields[section]}
        dropped += [f"{section}.{k}" for k in values if k not in fields[section]]
    if str(out["tokenizer"].get("tokenizer_path", "")).lower() == "randomwalks":
        out["tokenizer"]["tokenizer_path"] = tokenizer_folder
    out["train"]["tracker"] = None
    out["train"].setdefault("pipeline", "PromptPipeline")  # trlX requires it; its examples all name this one
    return out, sorted(dropped)


def fingerprint(items: Any) -> str:
    """A short hash of JSON-able data (walks, prompts, token ids): both sides must agree."""
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]


def post_training_prompts(start_letters: list[str]) -> list[str]:
    """The 1000 post-training prompts: every start letter ``EVAL_REPEATS`` times."""
    return list(start_letters) * EVAL_REPEATS


def optimality_figures(stats: dict[str, Any]) -> dict[str, float]:
    """``{"optimality": m}`` or ``{"optimality@beta=1": m, ...}`` from an ``evaluate()`` result
    of either side (keys ``metrics/optimality`` or ``metrics/optimality@beta=1``)."""
    figures = {}
    for key, value in stats.items():
        if key.startswith("metrics/optimality"):
            figures[key.split("/", 1)[1]] = float(value)
    return figures


class EvalClock:
    """Wall and CPU seconds spent inside ``evaluate`` calls (wrapped on the trainer's class, so
    calls from inside the training loop count), and the number of calls.

    After ``start()`` (where ``train()`` starts) every call is also recorded in ``evals``: the
    trainer's step, the process CPU seconds since ``start()`` at the end of the call (training
    and the evaluations so far, this one included) and its optimality figures; from those the
    summary reads the CPU time to a figure (``walks_seeds.py --target``)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.calls = 0
        self.started: float | None = None
        self.evals: list[dict[str, Any]] = []

    def start(self) -> None:
        self.started = time.process_time()

    def timed(self, fn, step_of):
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            stats = None
            try:
                stats = fn(*args, **kwargs)
                return stats
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.process_time() - cpu
                self.calls += 1
                if self.started is not None and isinstance(stats, dict):
                    self.evals.append({"step": step_of(args), "cpu_s": time.process_time() - self.started,
                                       "figures": optimality_figures(stats)})

        return timed

    def wrap_class(self, cls: type, attr: str = "evaluate") -> None:
        """Time every call of ``cls.attr`` (trlX: the trainers share one ``evaluate``)."""
        inner = self.timed(getattr(cls, attr), lambda args: getattr(args[0], "iter_count", None))
        setattr(cls, attr, lambda obj, *args, **kwargs: inner(obj, *args, **kwargs))

    def wrap_instance(self, obj: Any, attr: str = "evaluate") -> None:
        """Time ``obj.attr`` (rlkit: set from the train-start hook)."""
        setattr(obj, attr, self.timed(getattr(obj, attr), lambda args: getattr(obj, "iter_count", None)))


def result(train_wall: float, train_cpu: float, clock: EvalClock, steps: int, batch_size: int,
           figures: dict[str, float], **extra: Any) -> dict[str, Any]:
    """The result both workers write: ``train()`` wall and CPU time, evaluation's share, the
    training time without evaluation and its throughput, the post-training figures and the
    in-training evaluations (``EvalClock.evals``)."""
    train_only_wall = train_wall - clock.wall
    train_only_cpu = train_cpu - clock.cpu
    return {
        "wall_s": train_wall, "cpu_s": train_cpu, "eval_wall_s": clock.wall, "eval_cpu_s": clock.cpu,
        "evaluations": clock.calls, "train_wall_s": train_only_wall, "train_cpu_s": train_only_cpu,
        "steps": steps, "samples_per_s": steps * batch_size / train_only_cpu if train_only_cpu > 0 else 0.0,
        "eval_share": clock.wall / train_wall if train_wall > 0 else 0.0, **{f"post/{k}": v for k, v in figures.items()},
        "evals": clock.evals, **extra,
    }


def same_task(results: list[dict[str, Any]]) -> list[str]:
    """The fingerprints (walks, eval prompts, token ids of the first walks, vocabulary size)
    on which the runs of a case disagree: both sides must train on the same task."""
    keys = ("walks", "eval_prompts", "token_ids", "vocab_size")
    return [k for k in keys if len({json.dumps(r.get(k)) for r in results}) > 1]
