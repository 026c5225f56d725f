"""GRPO and RLOO on the accelerate engine, end to end on a tiny GPT-2 from a config: they
learn, beta = 0 builds no reference and runs no reference pass, several reward functions
combine with their weights, and train() selects them by method.name alone."""

import pytest
import torch

from rlkit_core import ConfigError, RlkitError
from rlkit_methods.grpo.trainer import GRPOTrainer, RLOOTrainer
from rlkit_methods.run.metrics_log import read_metrics
from grpo_setup import run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


def letters(samples, outputs, **kwargs):
    """The share of lowercase letters in each output: a reward a random byte model scores ~0.1 on."""
    return [sum(c.islower() for c in o) / max(len(o), 1) for o in outputs]


def length(samples, outputs, **kwargs):
    return [float(len(o)) for o in outputs]


def rollouts(tmp_path):
    return [r for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "rollout"]


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_grpo_and_rloo_learn_a_simple_reward(kind, tmp_path):
    run(kind, tmp_path, reward_fn=letters,
        config_overrides=dict(train=dict(total_steps=30, batch_size=16), optimizer=dict(kwargs=dict(lr=3e-3)),
                              method=dict(num_rollouts=32, chunk_size=16, beta=0.0)))
    scores = [r["rollout_scores/mean"] for r in rollouts(tmp_path)]
    first, last = sum(scores[:3]) / 3, sum(scores[-3:]) / 3
    assert last > first + 0.2, scores


def forward_calls(monkeypatch):
    from rlkit_accelerate.engine import AccelerateEngine

    calls = []
    original = AccelerateEngine.forward

    def recording(self, kind, batch, want=()):
        calls.append(tuple(want))
        return original(self, kind, batch, want)

    monkeypatch.setattr(AccelerateEngine, "forward", recording)
    return calls


def test_beta_zero_builds_no_reference_and_runs_no_reference_pass(tmp_path, monkeypatch):
    calls = forward_calls(monkeypatch)
    # one optimizer step per phase and one iteration: pi_old is the policy, no rollout forward at all
    trainer = run("grpo", tmp_path / "a", config_overrides=dict(train=dict(batch_size=16), method=dict(beta=0.0)))
    assert calls == [] and trainer.iter_count == 4
    assert not hasattr(trainer.unwrapped_model, "reference")  # the plain LM
    # two iterations need pi_old: the forward runs, never asking for the reference
    trainer = run("grpo", tmp_path / "b", config_overrides=dict(method=dict(beta=0.0, num_iterations=2)))
    assert calls and all("ref_logprobs" not in want for want in calls)
    # beta > 0: the hydra reference exists and every rollout forward reads it
    calls.clear()
    trainer = run("grpo", tmp_path / "c", config_overrides=dict(method=dict(beta=0.1)))
    assert trainer.unwrapped_model.reference is not None
    assert calls and all("ref_logprobs" in want for want in calls)
    train = [r for r in read_metrics(tmp_path / "c" / "ckpts" / "logs") if r["kind"] == "train"]
    assert all(r["policy/kl"] >= 0 for r in train)


def test_the_rollout_forward_skips_the_policy_when_pi_old_is_the_policy(tmp_path, monkeypatch):
    from rlkit_accelerate.engine import AccelerateEngine

    seen = []
    original = AccelerateEngine.forward

    def recording(self, kind, batch, want=()):
        out = original(self, kind, batch, want)
        seen.append((tuple(want), sorted(out)))
        return out

    monkeypatch.setattr(AccelerateEngine, "forward", recording)
    # beta > 0, one optimizer step per phase: the forward is for the reference alone, the policy's top is skipped
    trainer = run("grpo", tmp_path / "a", config_overrides=dict(train=dict(batch_size=16), method=dict(beta=0.1)))
    assert seen and all("no_logprobs" in want and "logprobs" not in out and "ref_logprobs" in out for want, out in seen)
    assert trainer.iter_count == 4
    train = [r for r in read_metrics(tmp_path / "a" / "ckpts" / "logs") if r["kind"] == "train"]
    assert train[0]["ratio"] == pytest.approx(1.0) and all(r["policy/kl"] >= 0 for r in train)
    # two steps per phase need pi_old from the rollout: the policy runs
    seen.clear()
    run("grpo", tmp_path / "b", config_overrides=dict(method=dict(beta=0.1)))
    assert seen and all("no_logprobs" not in want and "logprobs" in out for want, out in seen)
    # RLOO's KL in the reward reads pi_old at rollout time
    seen.clear()
    run("rloo", tmp_path / "c", config_overrides=dict(train=dict(batch_size=16), method=dict(beta=0.1)))
    assert seen and all("no_logprobs" not in want and "logprobs" in out for want, out in seen)


def test_rloo_puts_the_kl_in_the_reward(tmp_path):
    # a reward that varies within groups, so the policy moves away from the reference
    run("rloo", tmp_path, reward_fn=letters, config_overrides=dict(method=dict(beta=0.5), optimizer=dict(kwargs=dict(lr=3e-3))))
    first = rollouts(tmp_path)[0]
    assert first["policy/kl"] == pytest.approx(0.0, abs=1e-6)  # pi_old == pi_ref before any step
    later = rollouts(tmp_path)[1:]
    assert later and any(abs(r["policy/kl"]) > 0 for r in later)


def test_reward_functions_combine_with_their_weights(tmp_path):
    trainer = run("grpo", tmp_path, reward_fn=[letters, length], config_overrides=dict(method=dict(reward_weights=[2.0, -0.5])))
    for r in rollouts(tmp_path):
        want = 2.0 * r["rollout_scores/letters/mean"] - 0.5 * r["rollout_scores/length/mean"]
        assert r["rollout_scores/mean"] == pytest.approx(want, abs=1e-5)
    # evaluation scores the same weighted sum
    outputs = ["abC", "1"]
    assert trainer.reward_fn(samples=outputs, prompts=["", ""], outputs=outputs) == pytest.approx([2 * 2 / 3 - 1.5, -0.5])


def test_reward_weights_must_match_the_functions(tmp_path):
    with pytest.raises(ConfigError, match="2 weights for 1 reward functions"):
        run("grpo", tmp_path, reward_fn=[letters], config_overrides=dict(method=dict(reward_weights=[1.0, 2.0])))


def test_a_raising_second_reward_names_it_and_the_step(tmp_path):
    def broken(samples, **kwargs):
        raise ValueError("boom")

    with pytest.raises(RlkitError, match=r"reward function .*broken failed at step 0: ValueError: boom"):
        run("grpo", tmp_path, reward_fn=[letters, broken])


@pytest.mark.parametrize("name, trainer_name, cls", [("GRPOConfig", "AccelerateGRPOTrainer", GRPOTrainer),
                                                     ("rlooconfig", "AccelerateRLOOTrainer", RLOOTrainer)])
def test_train_selects_the_method_by_name(name, trainer_name, cls, tmp_path):
    trainer = run(name.lower()[:4], tmp_path, config_overrides=dict(method=dict(name=name), train=dict(trainer=trainer_name)))
    assert type(trainer).__name__ == trainer_name and isinstance(trainer, cls)
    assert type(trainer.engine).__name__ == "AccelerateEngine"
    assert trainer.iter_count == 4


def test_groups_stay_whole_and_truncated_samples_leave_the_loss(tmp_path):
    trainer = run("grpo", tmp_path, config_overrides=dict(method=dict(mask_truncated_completions=True, beta=0.0,
                                                                      gen_kwargs=dict(max_new_tokens=2))))
    store = trainer.store.history
    prompts = [tuple(e.query_tensor.tolist()) for e in store]
    assert all(len(set(prompts[i : i + 4])) == 1 for i in range(0, len(prompts), 4))  # groups of 4 in a row
    batch = trainer.store.collate(store)
    truncated = torch.tensor([e.truncated for e in store])
    assert truncated.any()
    assert (batch.response_mask[truncated] == 0).all() and (batch.response_mask[~truncated].sum(1) > 0).all()
    assert rollouts(tmp_path)[-1]["completions/clipped_ratio"] == pytest.approx(truncated.float().mean().item())


def test_seq2seq_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="causal"):
        run("grpo", tmp_path, config_overrides=dict(model=dict(model_arch_type="seq2seq")))
