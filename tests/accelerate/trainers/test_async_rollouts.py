"""Asynchronous rollouts and the truncated importance-sampling correction in real runs (issue 27),
on the tiny randomwalks set-up: PPO takes 4 steps a phase (16 rollouts, batch 8, 2 epochs)."""

import threading

import pytest
import torch

import grpo_setup
import walks_setup
from rlkit_core.testing.engine import exported_tensors, read_records
from rlkit_core.testing.generator import check_generator_logprobs, check_generator_samples

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)
COPY = "rlkit_core.testing.generator:HFCopyGenerator"


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    from accelerate.state import AcceleratorState, GradientState

    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def records(folder, kind):
    return [r for r in read_records(folder) if r["kind"] == kind]


def ppo(folder, **train):
    return walks_setup.run("ppo", folder, config_overrides=dict(train=dict(dict(eval_interval=100), **train)))


@pytest.mark.parametrize("bound", [1, 2])
def test_async_ppo_trains_each_phase_on_samples_at_most_max_staleness_phases_old(tmp_path, bound):
    """The engine's own sampler (it shares the trained weights, so each phase ahead is sampled
    when planned): phase p trains on samples of the policy that started phase p - min(p, bound)."""
    trainer = ppo(tmp_path, total_steps=16, async_rollouts=True, max_staleness=bound)
    phases = records(tmp_path, "rollout")
    assert [r["step"] for r in phases] == [0, 4, 8, 12]
    assert [r["async/staleness"] for r in phases] == [min(p, bound) for p in range(4)]
    assert [r["async/policy_version"] for r in phases] == [4 * max(p - bound, 0) for p in range(4)]
    assert [r["async/staleness_steps"] for r in phases] == [4 * min(p, bound) for p in range(4)]
    assert {e.version for e in trainer.store.history} == {4 * (3 - bound)}  # recorded on every rollout
    # without the correction the ratio is against the policy that sampled: pi_old is its log-probs
    assert all(e.sampler_logprobs is None for e in trainer.store.history)


def test_async_ppo_samples_beside_training_with_the_weights_of_the_planned_version(tmp_path):
    """A generator with its own weights samples the next phase in a thread, from a snapshot of
    the weights at the phase's start: after 8 steps it holds exactly step 4's weights (not the
    trainer's at the time it ran); evaluation meanwhile samples the trained policy; no thread
    is left when learn ends."""
    trainer = ppo(tmp_path, total_steps=8, checkpoint_interval=4, async_rollouts=True, generator=COPY, eval_interval=4)
    phases = records(tmp_path, "rollout")
    assert [(r["async/staleness"], r["async/policy_version"]) for r in phases] == [(0, 0), (1, 0)]
    # phase 2 was planned at step 4 and sampled while steps 5-8 trained (learn waits for it)
    assert trainer.ahead.jobs[0].phase == 2 and trainer.ahead.jobs[0].version == 4
    assert trainer.generator.version == 4 and trainer.iter_count == 8
    assert trainer.generator.calls == 6  # phases 0, 1 and 2, two chunks each; evaluation never asked it
    step4 = exported_tensors(tmp_path / "ckpts" / "checkpoint_4" / "hf_model")
    theirs = dict(trainer.generator.model.named_parameters())
    compared = [k for k in step4 if k.split(":", 1)[1] in theirs]
    assert compared
    for key in compared:
        assert torch.equal(step4[key], theirs[key.split(":", 1)[1]].detach()), key
    assert [r["step"] for r in records(tmp_path, "eval")] == [0, 4, 8]
    check_generator_samples(trainer, ["a", "bcd"])  # evaluation's sampler: the trained policy, its version
    check_generator_logprobs(trainer, ["a", "bcd"])
    assert not [t for t in threading.enumerate() if t.name.startswith("rlkit-rollouts")]


def test_an_async_resume_trains_on_the_rollouts_of_the_uninterrupted_run(tmp_path):
    """Checkpoint at step 6, mid-phase, while phase 2's samples (planned ahead at step 4) wait:
    the checkpoint keeps them, and the resumed run's rollouts, losses and weights are those of
    the run that went straight through."""
    common = dict(total_steps=12, checkpoint_interval=6, async_rollouts=True)
    ppo(tmp_path / "straight", **common)
    ppo(tmp_path / "split", **dict(common, total_steps=6))
    ppo(tmp_path / "split", **dict(common, resume_from_checkpoint=str(tmp_path / "split" / "ckpts" / "checkpoint_6")))
    keys = ("rollout_scores/mean", "async/policy_version", "policy/sqrt_kl")
    straight, split = ([[r[k] for k in keys] for r in records(tmp_path / name, "rollout")] for name in ("straight", "split"))
    # phases at steps 0, 4 | resume: train() re-makes phase 0 before learn loads the checkpoint | 8
    assert straight == split[:2] + split[3:] and len(split) == 4
    losses = {name: [r["losses/total_loss"] for r in records(tmp_path / name, "train")] for name in ("straight", "split")}
    assert losses["straight"] == losses["split"]
    a = exported_tensors(tmp_path / "straight" / "ckpts" / "checkpoint_12" / "hf_model")
    b = exported_tensors(tmp_path / "split" / "ckpts" / "checkpoint_12" / "hf_model")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_correction_weighs_one_with_the_trainers_own_sampler_and_caps_stale_samples(tmp_path):
    """The engine's sampler at the trainer's weights: every weight is 1 within float rounding, and
    the losses are those of the run without the correction. Asynchronously the samples' policy
    lags the trainer's: the weights move off 1, never above the cap."""
    plain = ppo(tmp_path / "plain", total_steps=8)
    assert all(e.sampler_logprobs is None for e in plain.store.history)  # off by default: nothing kept
    corrected = walks_setup.run("ppo", tmp_path / "on", config_overrides=dict(
        train=dict(total_steps=8, eval_interval=100), method=dict(vllm_importance_sampling_correction=True)))
    assert all(e.sampler_logprobs is not None for e in corrected.store.history)
    steps = records(tmp_path / "on", "train")
    assert all(abs(r["sampling/importance_sampling_ratio/max"] - 1) < 1e-4 and
               abs(r["sampling/importance_sampling_ratio/min"] - 1) < 1e-4 for r in steps)
    base = [r["losses/total_loss"] for r in records(tmp_path / "plain", "train")]
    assert [r["losses/total_loss"] for r in steps] == pytest.approx(base, abs=1e-5)

    walks_setup.run("ppo", tmp_path / "async", config_overrides=dict(
        train=dict(total_steps=12, eval_interval=100, async_rollouts=True),
        method=dict(vllm_importance_sampling_correction=True, vllm_importance_sampling_clip_max=1.5)))
    lagging = [r for r in records(tmp_path / "async", "train") if r["step"] > 4]
    assert max(abs(r["sampling/importance_sampling_ratio/max"] - 1) for r in lagging) > 1e-3
    assert all(r["sampling/importance_sampling_ratio/max"] <= 1.5 for r in lagging)


def test_async_grpo_without_the_correction_takes_pi_old_from_the_sampler(tmp_path):
    """One step a phase, beta 0: no rollout forward runs at all (synchronously pi_old would be
    the policy itself, ratio 1), yet pi_old is kept: the generator's log-probs of the policy
    that sampled, one step behind."""
    trainer = grpo_setup.run("grpo", tmp_path, config_overrides=dict(
        train=dict(total_steps=3, batch_size=16, async_rollouts=True), method=dict(beta=0.0)))
    phases = records(tmp_path, "rollout")
    assert [r["async/policy_version"] for r in phases] == [0, 0, 1]
    assert not any("policy/logprob_gap_max" in r or r["time/rollout_forward"] for r in phases)  # no forward
    assert all(e.old_logprobs is not None and e.sampler_logprobs is None for e in trainer.store.history)
    assert all(e.old_logprobs.shape == e.response_tensor.shape and (e.old_logprobs <= 0).all() for e in trainer.store.history)


class DyingCopy:
    """A generator with its own weights whose process dies at its fifth call: phase 2's, sampled
    while steps 5-8 train (phases 0 and 1 take two calls each)."""

    def __init__(self, engine):
        from rlkit_core.testing.generator import HFCopyGenerator

        self.copy = HFCopyGenerator(engine)

    def generate(self, *args, **kwargs):
        if self.copy.calls == 4:
            raise RuntimeError("generator process exited with code 137")
        return self.copy.generate(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.copy, name)


def test_a_generator_dying_beside_training_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    """Its error reaches the loop at the first point that needs the samples (here step 8's
    checkpoint, which would keep them: it is not written); step 4's stays whole."""
    with pytest.raises(RuntimeError, match="generator process exited with code 137"):
        ppo(tmp_path, total_steps=12, checkpoint_interval=4, async_rollouts=True, generator=f"{__name__}:DyingCopy")
    assert (tmp_path / "ckpts" / "checkpoint_4" / "COMPLETE").is_file()
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["checkpoint_4", "logs"]
    assert [r["step"] for r in records(tmp_path, "rollout")] == [0, 4]
    assert not [t for t in threading.enumerate() if t.name.startswith("rlkit-rollouts")]


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_async_grpo_and_rloo_with_the_correction(kind, tmp_path):
    trainer = grpo_setup.run(kind, tmp_path, config_overrides=dict(
        train=dict(total_steps=6, async_rollouts=True), method=dict(vllm_importance_sampling_correction=True)))
    phases = records(tmp_path, "rollout")  # 2 steps a phase (16 samples, batch 8, one iteration)
    assert [r["async/staleness"] for r in phases] == [0, 1, 1]
    assert [r["async/policy_version"] for r in phases] == [0, 0, 2]
    assert {e.version for e in trainer.store.history} == {2}
    assert all(e.sampler_logprobs is not None and e.old_logprobs is not None for e in trainer.store.history)
    assert all(r["sampling/importance_sampling_ratio/max"] <= 3.0 for r in records(tmp_path, "train"))
