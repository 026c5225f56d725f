"""The generator kit (rlkit_core.testing.generator) on the accelerate engine's default
generator, and the loop's use of a generator with its own weights. The NeMo engine's default
generator runs the same checks in tests/nemo/megatron."""

import sys
from pathlib import Path

import pytest
import torch

from rlkit_core.testing.engine import check_stop_sequences, read_records
from rlkit_core.testing.generator import (
    HFCopyGenerator,
    SkippedSync,
    check_export_generates_generated,
    check_generator_follows_updates,
    check_generator_logprobs,
    check_generator_protocol,
    check_generator_samples,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "accelerate" / "trainers"))
sys.path.insert(0, str(Path(__file__).parents[1] / "accelerate"))
import grpo_setup  # noqa: E402
import walks_setup  # noqa: E402

import rlkit_core as rlkit  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)
PROMPTS = ["a", "bcd", "ef"]
COPY = "rlkit_core.testing.generator:HFCopyGenerator"


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """The trainer keeps training after the run in some checks: reset accelerate's state after
    the test, not after the run."""
    from accelerate.state import AcceleratorState, GradientState

    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def run(method, folder, overrides=None, **train_kwargs):
    return walks_setup.run(method, folder, config_overrides=overrides, **train_kwargs)


@pytest.mark.parametrize("method", ["ppo", "sft"])
def test_default_generator_samples_logprobs_and_export(method, tmp_path):
    trainer = run(method, tmp_path, overrides=dict(train=dict(total_steps=2)), stop_sequences=["##"])
    check_generator_protocol(trainer.generator)
    assert type(trainer.generator).__name__ == "AccelerateGenerator"
    samples = check_generator_samples(trainer, PROMPTS)
    assert samples.logprobs is not None and samples.version == 2
    check_generator_logprobs(trainer, PROMPTS)
    check_export_generates_generated(trainer, tmp_path / "export", PROMPTS)
    check_stop_sequences(trainer, "##")


LORA = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["c_attn"], "lora_dropout": 0.0}
LAYOUTS = {
    "hydra": ("ppo", dict(model=dict(num_layers_unfrozen=1))),  # the policy caches its trunk while sampling
    "lora-ppo": ("ppo", dict(model=dict(peft_config=LORA))),
    "lora-sft": ("sft", dict(model=dict(peft_config=LORA))),
}


@pytest.mark.parametrize("layout", [*LAYOUTS, "t5-ppo"])
def test_default_generator_logprobs_on_every_model_layout(layout, tmp_path):
    """The hook finds the HF model inside rlkit's and peft's wrappers, and reads the decoder's
    inputs of an encoder-decoder."""
    if layout == "t5-ppo":
        import t5_walks_setup

        trainer = t5_walks_setup.run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=1)))
    else:
        method, overrides = LAYOUTS[layout]
        trainer = run(method, tmp_path, overrides=dict(overrides, train=dict(total_steps=1)))
    check_generator_samples(trainer, PROMPTS)
    check_generator_logprobs(trainer, PROMPTS)


@pytest.mark.parametrize("kind", ["PROMPT_TUNING", "PREFIX_TUNING"])
def test_default_generator_logprobs_under_prompt_learning_equal_hf_generates_logits(kind, tmp_path):
    """Prompt tuning feeds embeddings, not ids, at every step: the step's row is kept until the
    sampled ids are known. Compared with transformers' own unprocessed logits (``output_logits``)."""
    trainer = run("sft", tmp_path, overrides=dict(model=dict(peft_config={"peft_type": kind, "num_virtual_tokens": 3}),
                                                  train=dict(total_steps=1)))
    batch = trainer.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    greedy = dict(max_new_tokens=5, do_sample=False, eos_token_id=None)
    ours = trainer.generator.generate(batch["input_ids"], batch["attention_mask"], **greedy)
    with trainer.engine.evaluating() as model, torch.no_grad():
        out = model.generate(**batch, **greedy, output_logits=True, return_dict_in_generate=True)
    new = out.sequences[:, batch["input_ids"].shape[1]:]
    assert torch.equal(ours.ids, out.sequences)
    theirs = torch.stack(out.logits, 1).float().log_softmax(-1).gather(2, new[..., None])[..., 0]
    assert torch.allclose(ours.logprobs, theirs, atol=1e-5), (ours.logprobs, theirs)


def test_default_generator_logprobs_with_shared_prompt_prefill(tmp_path):
    """Groups of one prompt (GRPO's shape) run the prompt once before generate; the log-probs
    still come from the generate steps only."""
    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1)))
    check_generator_logprobs(trainer, ["ab", "ab", "cde", "cde", "ab"])


def test_trainer_generate_returns_the_generators_ids(tmp_path):
    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1)))
    batch = trainer.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    ids = trainer.generate(batch["input_ids"], batch["attention_mask"])
    assert isinstance(ids, torch.Tensor)
    assert torch.equal(ids, trainer.sample(batch["input_ids"], batch["attention_mask"]).ids)  # greedy


def test_a_generator_with_its_own_weights_follows_every_step(tmp_path):
    trainer = run("ppo", tmp_path, overrides=dict(train=dict(total_steps=1)))
    gap = check_generator_follows_updates(trainer, HFCopyGenerator(trainer.engine, tmp_path / "copy"), PROMPTS, steps=2)
    assert gap < 1e-4


def test_a_skipped_sync_is_caught(tmp_path):
    trainer = run("ppo", tmp_path, overrides=dict(train=dict(total_steps=1)))
    stale = SkippedSync(HFCopyGenerator(trainer.engine, tmp_path / "copy"), skip_version=trainer.iter_count + 2)
    with pytest.raises(AssertionError, match="log-probs differ"):
        check_generator_follows_updates(trainer, stale, PROMPTS, steps=2)


def test_the_loop_samples_through_the_configured_generator_and_syncs_it(tmp_path):
    """train.generator names a factory; rollouts and evaluation come from it, and after the run
    it holds the trained policy (log-probs equal the engine's)."""
    trainer = run("ppo", tmp_path, overrides=dict(train=dict(total_steps=3, generator=COPY)))
    assert isinstance(trainer.generator, HFCopyGenerator)
    # rollouts (16 prompts in chunks of 8, twice: before and after the 2 steps of a phase) and 2 evaluations
    assert trainer.generator.calls >= 4, trainer.generator.calls
    check_generator_logprobs(trainer, PROMPTS)  # the weights first: a missed sync fails here
    assert trainer.generator.version == 3
    # every step logs its sync's time (weights gathered and copied here) and the run's sum
    steps = [r for r in read_records(tmp_path) if r["kind"] == "train"]
    assert [r["step"] for r in steps] == [1, 2, 3], steps
    times = [r["generator/sync_s"] for r in steps]
    sums = [r["generator/sync_s_sum"] for r in steps]
    assert all(t > 0 for t in times) and sums[-1] == pytest.approx(trainer.sync_seconds), (times, sums)
    assert sums[0] > times[0] and all(b - a == pytest.approx(t) for a, b, t in zip(sums, sums[1:], times[1:]))


def test_the_default_generators_sync_time_is_logged_too(tmp_path):
    run("sft", tmp_path, overrides=dict(train=dict(total_steps=2)))
    steps = [r for r in read_records(tmp_path) if r["kind"] == "train"]
    assert len(steps) == 2 and all(0 <= r["generator/sync_s"] < 0.1 for r in steps), steps


def test_an_unknown_generator_is_a_config_error(tmp_path):
    from rlkit_core.errors import ConfigError

    with pytest.raises(ConfigError, match="train.generator: 'vllm' is not a known generator"):
        run("sft", tmp_path, overrides=dict(train=dict(total_steps=1, generator="vllm")))


def test_a_resumed_run_syncs_its_generator_with_the_checkpoints_weights(tmp_path):
    """A generator made from the initial weights gets every weight when the checkpoint loads
    (here the run has no steps left, so no step syncs it)."""
    run("ppo", tmp_path, overrides=dict(train=dict(total_steps=2, checkpoint_interval=2, generator=COPY)))
    resume = str(tmp_path / "ckpts" / "checkpoint_2")
    trainer = run("ppo", tmp_path, overrides=dict(train=dict(total_steps=2, generator=COPY, resume_from_checkpoint=resume)))
    check_generator_logprobs(trainer, PROMPTS)  # the weights first: a stale copy fails here
    assert trainer.iter_count == 2 and trainer.generator.version == 2


class GeneratorCalls:
    """The generator's call count at every rollout phase."""

    def __init__(self):
        self.calls = []

    @rlkit.hookimpl
    def rlkit_rollouts_made(self, trainer, step, num_rollouts, stats, is_main_process):
        self.calls.append(trainer.generator.calls)


@pytest.mark.parametrize("kind", ["grpo", "rloo", "rft"])
def test_every_online_trainer_samples_its_rollouts_through_the_generator(kind, tmp_path):
    """The first rollouts are made before any evaluation: every call counted then is a rollout's.
    After the run the generator holds the trained policy."""
    seen = GeneratorCalls()
    if kind == "rft":
        import test_rft_trainer as rft

        prompts = rft.PROMPTS[:3]
        c = rft.config(tmp_path).evolve(train=dict(total_steps=2, generator=COPY))
        trainer = rlkit.train(reward_fn=rft.reward, prompts=rft.PROMPTS[:5], eval_prompts=rft.PROMPTS[:2], config=c,
                              plugins=[seen])
    else:
        prompts = PROMPTS
        trainer = grpo_setup.run(kind, tmp_path, config_overrides=dict(train=dict(total_steps=2, generator=COPY)),
                                 plugins=[seen])
    assert seen.calls and seen.calls[0] > 0, seen.calls
    check_generator_logprobs(trainer, prompts)


def stale_copy(engine):
    """A generator that misses the sync after step 4, the last before the second rollout phase
    (a factory for train.generator; every sync sends all trainable weights, so only the last
    one before sampling leaves it stale)."""
    return SkippedSync(HFCopyGenerator(engine), skip_version=4)


def rollout_records(folder):
    from rlkit_core.testing.engine import read_records

    return [r for r in read_records(folder) if r["kind"] == "rollout"]


def test_ppo_logs_the_generators_logprob_gap_every_phase(tmp_path):
    """Train/inference agreement: each rollout phase logs how far the generator's log-probs of
    the sampled tokens are from the trainer's forward; ~0 for the default generator, and a
    generator that missed a sync shows it (the gap is measured, not assumed)."""
    overrides = dict(train=dict(total_steps=8, eval_interval=100, checkpoint_interval=100))  # 4 steps a phase
    run("ppo", tmp_path / "default", overrides=overrides)
    phases = rollout_records(tmp_path / "default")
    assert len(phases) >= 2
    assert all(p["policy/logprob_gap_max"] < 1e-4 for p in phases), [p["policy/logprob_gap_max"] for p in phases]
    stale = dict(train=dict(overrides["train"], generator=f"{__name__}:stale_copy"))
    run("ppo", tmp_path / "stale", overrides=stale)
    gaps = [p["policy/logprob_gap_max"] for p in rollout_records(tmp_path / "stale")]
    assert gaps[0] < 1e-4 and max(gaps[1:]) > 1e-3, gaps
