"""Asynchronous rollouts without a model (issue 27): the schedule's staleness bound, the
methods that refuse the mode, and what a resume may change (train.generator may, the async
keys may not). The runs themselves are in tests/accelerate/trainers/test_async_rollouts.py."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlkit_core import load_config
from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import SharedWeightsGenerator
from rlkit_methods.online import Responses
from rlkit_methods.rollouts_ahead import Job, RolloutsAhead
from rlkit_methods.run.resume import check_resume_config

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "examples" / "randomwalks" / "grpo_randomwalks.yml"
TINY = {"model.model_path": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64}}


class Chunks:
    """Collated prompt chunks of 4 rows, numbered in the order they are taken."""

    def __init__(self):
        self.taken = 0

    def __call__(self):
        self.taken += 1
        return {"input_ids": torch.full((4, 2), self.taken), "attention_mask": torch.ones(4, 2, dtype=torch.long)}


def fake_trainer():
    """What RolloutsAhead reads of a trainer: a generator on the engine's weights (its jobs run
    at once), the step, the rollout kwargs, and a sampler returning the chunk's number."""
    trainer = SimpleNamespace(generator=SharedWeightsGenerator(engine=None), iter_count=0, experience_kwargs={})
    trainer.sample_rollouts = None  # the fake sample_responses samples by itself

    def sample_responses(batch, sampler=None, **kwargs):
        n = int(batch["input_ids"][0, 0])
        return Responses(prompts=[[n]] * 4, outputs=[[n, n]] * 4, truncated=[False] * 4, metadata=[{}] * 4,
                         logprobs=[None] * 4, versions=[trainer.generator.version] * 4)

    trainer.sample_responses = sample_responses
    return trainer


@pytest.mark.parametrize("bound", [1, 2, 3])
def test_each_phase_samples_from_the_policy_at_most_max_staleness_phases_old(bound):
    """The loop's order: phase p's rollouts stored -> plan ahead from the policy that starts p's
    training -> train p (4 steps) -> take p + 1. Every phase's samples are exactly
    min(p, bound) phases old (0 for the first phase, sampled before any training)."""
    trainer, chunks = fake_trainer(), Chunks()
    ahead = RolloutsAhead(trainer, bound)
    assert not ahead.overlap  # a generator on the engine's weights samples when the job is planned
    ahead.plan(0, trainer.iter_count, chunks, rows=8)
    seen = []
    for phase in range(1, 8):
        trainer.iter_count += 4  # phase - 1 trains
        trainer.generator.update_weights(SimpleNamespace(version=trainer.iter_count))
        parts = ahead.take(phase)
        seen.append((ahead.last["async/staleness"], ahead.last["async/policy_version"], parts[0].prompts[0][0]))
        assert {v for part in parts for v in part.versions} == {ahead.last["async/policy_version"]}
        ahead.plan(phase, trainer.iter_count, chunks, rows=8)
    assert [s for s, _, _ in seen] == [min(p, bound) for p in range(1, 8)]
    assert [v for _, v, _ in seen] == [4 * max(p - bound, 0) for p in range(1, 8)]
    assert [c for _, _, c in seen] == [1 + 2 * p for p in range(7)]  # the prompts in order, 2 chunks a phase


def test_samples_older_than_the_bound_or_for_another_phase_are_refused():
    ahead = RolloutsAhead(fake_trainer(), max_staleness=1)
    ahead.jobs = [Job(phase=3, policy_phase=1, version=4, result=[])]
    with pytest.raises(RlkitError, match=r"phase 3's samples come from the policy of phase 1, 2 phases old, over "
                                         r"train.max_staleness=1"):
        ahead.take(3)
    ahead.jobs = [Job(phase=3, policy_phase=2, version=8, result=[])]
    with pytest.raises(RlkitError, match=r"no samples planned for rollout phase 2 \(planned: \[3\]\)"):
        ahead.take(2)


def test_a_checkpoint_keeps_the_samples_planned_ahead():
    trainer = fake_trainer()
    ahead = RolloutsAhead(trainer, 2)
    ahead.plan(0, 0, Chunks(), rows=4)
    from rlkit_methods.run.state import plain

    state = plain(ahead.state())  # as write_state stores it: dicts, tensors, numbers
    again = RolloutsAhead(trainer, 2)
    again.load_state(state)
    assert [(j.phase, j.policy_phase, j.version) for j in again.jobs] == [(1, 0, 0), (2, 0, 0)]
    assert [again.take(1)[0].prompts, again.take(2)[0].prompts] == [[[1]] * 4, [[2]] * 4]


def test_methods_that_cannot_learn_off_policy_refuse_async_rollouts_in_one_line(tmp_path):
    """Before any model loads (the refusal comes first in the trainer's constructor)."""
    from rlkit_methods.ilql.trainer import ILQLTrainer
    from rlkit_methods.rft.trainer import RFTTrainer
    from rlkit_methods.sft.trainer import SFTTrainer

    config = SimpleNamespace(train=SimpleNamespace(async_rollouts=True))
    for trainer, why in [(RFTTrainer, "its loss has no importance ratio"), (SFTTrainer, "it makes no rollouts"),
                         (ILQLTrainer, "it makes no rollouts")]:
        with pytest.raises(ConfigError) as error:
            trainer(config, engine=object())
        line = str(error.value)
        assert line.startswith(f"train.async_rollouts: {trainer.__name__} cannot learn from rollouts of an older policy")
        assert why in line and line.endswith("set train.async_rollouts: false") and "\n" not in line


def test_ppo_grpo_and_rloo_accept_async_rollouts():
    from rlkit_methods.grpo.trainer import GRPOTrainer, RLOOTrainer
    from rlkit_methods.ppo.trainer import PPOTrainer

    assert PPOTrainer.on_policy_only is GRPOTrainer.on_policy_only is RLOOTrainer.on_policy_only is None


def saved(tmp_path, **overrides):
    folder = tmp_path / "checkpoint_4"
    folder.mkdir()
    load_config(GRPO, {**TINY, **overrides}).save_yaml(folder / "config.yml")
    return folder


def test_a_resume_may_change_the_generator_but_not_the_async_schedule(tmp_path, rlkit_host):
    folder = saved(tmp_path, **{"train.async_rollouts": True})
    same = {**TINY, "train.async_rollouts": True}
    check_resume_config(folder, load_config(GRPO, {**same, "train.generator": "rlkit_core.testing.generator:HFCopyGenerator",
                                                   "train.generator_kwargs": {"folder": "x"}}))
    for key, value, then in [("train.async_rollouts", False, True), ("train.max_staleness", 2, 1)]:
        with pytest.raises(ConfigError) as error:
            check_resume_config(folder, load_config(GRPO, {**same, key: value}))
        assert str(error.value).startswith(f"{key}: {value}, but {folder} was trained with {then} (the checkpoint holds")
        # a hard rule: allowing changes does not cover it
        with pytest.raises(ConfigError):
            check_resume_config(folder, load_config(GRPO, {**same, key: value, "train.resume_config_changes": "allow"}))
    # the correction may not change silently: it changes the loss
    with pytest.raises(ConfigError, match="method.vllm_importance_sampling_correction: True"):
        check_resume_config(folder, load_config(GRPO, {**same, "method.vllm_importance_sampling_correction": True}))
