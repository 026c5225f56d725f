"""Fakes for testing rlkit plugins without models: a method, a trainer, a pipeline, rewards.

They follow the same contracts as the real ones (see :mod:`rlkit_core.api`), so a plugin
that works with them plugs into the real trainers the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from rlkit_core.config import MethodConfig, positive
from rlkit_core.plugins import get_host, hookimpl
from rlkit_core.registry import BackendSpec, MethodSpec, PipelineSpec, RewardSpec, TrainerSpec


@attrs.define
class FakeMethodConfig(MethodConfig):
    """A method section with one PPO-like field and generation settings."""

    num_rollouts: int = attrs.field(default=4, validator=positive)
    gamma: float = attrs.field(default=1.0, validator=positive)
    gen_kwargs: dict[str, Any] = attrs.Factory(lambda: {"max_new_tokens": 4})


def config_dict(method: str = "fake", trainer: str = "FakeTrainer", **sections: dict) -> dict[str, Any]:
    """A minimal valid config dict; ``sections`` are merged into it section by section."""
    base: dict[str, Any] = {
        "train": {
            "total_steps": 4,
            "seq_length": 32,
            "epochs": 1,
            "batch_size": 2,
            "checkpoint_interval": 2,
            "eval_interval": 2,
            "trainer": trainer,
            "pipeline": "FakePromptPipeline",
        },
        "model": {"model_path": "fake-model"},
        "tokenizer": {"tokenizer_path": "fake-tokenizer"},
        "optimizer": {"name": "adamw", "kwargs": {"lr": 1.0e-4}},
        "scheduler": {"name": "cosine_annealing", "kwargs": {"T_max": 4}},
        "method": {"name": method},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values} if isinstance(values, dict) else values
    return base


class FakeTokenizer:
    bos_token = "<s>"


class FakePromptPipeline:
    """trlX's prompt pipeline contract: ``(prompts, max_prompt_length, tokenizer, add_special_tokens)``."""

    def __init__(self, prompts, max_prompt_length, tokenizer, add_special_tokens=False):
        self.prompts = list(prompts)
        self.max_prompt_length = max_prompt_length
        self.add_special_tokens = add_special_tokens

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index):
        return self.prompts[index]


class FakeTrainer:
    """Records what ``train()`` hands it; ``learn()`` "trains" ``train.total_steps`` steps,
    calling the lifecycle hooks the way real trainers do."""

    method_name = None

    def __init__(self, config, reward_fn=None, metric_fn=None, stop_sequences=None, logit_mask=None, **kwargs):
        self.config = config
        self.reward_fn = reward_fn
        self.metric_fn = metric_fn
        self.stop_sequences = stop_sequences
        self.logit_mask = logit_mask
        self.trainer_kwargs = kwargs
        self.tokenizer = FakeTokenizer()
        self.is_main_process = True
        self.prompt_pipeline = None
        self.eval_pipeline = None
        self.experience: tuple = ()
        self.steps = 0

    def add_prompt_pipeline(self, pipeline) -> None:
        self.prompt_pipeline = pipeline

    def add_eval_pipeline(self, pipeline) -> None:
        self.eval_pipeline = pipeline

    def make_experience(self, *args) -> None:
        self.experience = args
        hook = get_host().hook
        hook.rlkit_rollouts_made(trainer=self, step=self.steps, num_rollouts=len(args), stats={}, is_main_process=True)

    def learn(self) -> None:
        hook = get_host().hook
        for _ in range(self.config.train.total_steps):
            self.steps += 1
            metrics = {"losses/total_loss": 1.0 / self.steps}
            if self.reward_fn is not None and self.prompt_pipeline is not None:
                prompts = self.prompt_pipeline.prompts[:1]
                scores = self.reward_fn(samples=prompts, prompts=prompts, outputs=[""] * len(prompts))
                metrics["reward/mean"] = float(sum(scores)) / len(scores)
            hook.rlkit_step_end(trainer=self, step=self.steps, metrics=metrics, is_main_process=True)
            if self.steps % self.config.train.eval_interval == 0:
                samples = [{"prompt": p, "output": ""} for p in self.eval_pipeline.prompts]
                hook.rlkit_evaluation_end(trainer=self, step=self.steps, metrics={}, samples=samples, is_main_process=True)


    def save(self, directory=None) -> None:
        """Write the resolved config into ``directory`` and report the checkpoint."""
        path = Path(directory or self.config.train.checkpoint_dir) / f"checkpoint_{self.steps}"
        path.mkdir(parents=True, exist_ok=True)
        self.config.save_yaml(path / "config.yml")
        get_host().hook.rlkit_checkpoint_saved(trainer=self, step=self.steps, path=path, is_main_process=True)


def constant_reward(value: float = 1.0):
    """A reward factory: every sample scores ``value``."""

    def reward_fn(samples, prompts=None, outputs=None, **kwargs):
        return [float(value)] * len(samples)

    return reward_fn


def length_metric():
    """A metric factory: output length in characters."""

    def metric_fn(samples, prompts=None, outputs=None, **kwargs):
        return {"length": [float(len(o)) for o in (outputs or samples)]}

    return metric_fn


def in_memory_source(items=()):
    """A source pipeline factory: returns ``items`` as given."""
    return list(items)


class FakePlugin:
    """Registers the fakes: method ``fake`` (online), trainer ``FakeTrainer`` on backend
    ``fake``, pipelines ``FakePromptPipeline`` and ``in_memory``, reward ``constant`` and
    metric ``length``. Pass ``mode`` to make the fake method offline or supervised."""

    def __init__(self, mode: str = "online", method: str = "fake"):
        self.mode = mode
        self.method = method

    @hookimpl
    def rlkit_register_methods(self):
        return [MethodSpec(self.method, FakeMethodConfig, mode=self.mode, aliases=("FakeMethodConfig",))]

    @hookimpl
    def rlkit_register_backends(self):
        return [BackendSpec("fake", trainers=[TrainerSpec("FakeTrainer", FakeTrainer, method=self.method)])]

    @hookimpl
    def rlkit_register_pipelines(self):
        return [
            PipelineSpec("FakePromptPipeline", FakePromptPipeline, kind="prompt"),
            PipelineSpec("in_memory", in_memory_source, kind="source"),
        ]

    @hookimpl
    def rlkit_register_rewards(self):
        return [RewardSpec("constant", constant_reward), RewardSpec("length", length_metric, kind="metric")]


class RecordingObserver:
    """Records every lifecycle hook call as ``(hook name, kwargs)`` in ``calls``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    @hookimpl
    def rlkit_train_start(self, trainer, config, is_main_process):
        self.calls.append(("rlkit_train_start", {"config": config, "is_main_process": is_main_process}))

    @hookimpl
    def rlkit_rollouts_made(self, trainer, step, num_rollouts, stats, is_main_process):
        self.calls.append(("rlkit_rollouts_made", {"step": step, "num_rollouts": num_rollouts, "stats": stats}))

    @hookimpl
    def rlkit_step_end(self, trainer, step, metrics, is_main_process):
        self.calls.append(("rlkit_step_end", {"step": step, "metrics": metrics}))

    @hookimpl
    def rlkit_evaluation_end(self, trainer, step, metrics, samples, is_main_process):
        self.calls.append(("rlkit_evaluation_end", {"step": step, "metrics": metrics, "samples": samples}))

    @hookimpl
    def rlkit_checkpoint_saved(self, trainer, step, path, is_main_process):
        self.calls.append(("rlkit_checkpoint_saved", {"step": step, "path": path}))

    @hookimpl
    def rlkit_train_end(self, trainer, error, is_main_process):
        self.calls.append(("rlkit_train_end", {"error": error}))
