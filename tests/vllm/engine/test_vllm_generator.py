"""The vLLM generator (rlkit-vllm) against the accelerate engine, through the generator kit
(rlkit_core.testing.generator): a GRPO run on the walks with ``train.generator: vllm``, then
the kit's checks on the trained trainer. One vLLM engine per module: start-up is slow. The
model's head dimension is 64 (vLLM's CPU attention does not take the kit's usual 8 or 16)."""

import sys
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config

from rlkit_core.errors import RlkitError
from rlkit_core.generator import WeightUpdate
from rlkit_core.testing.generator import (
    SkippedSync,
    check_generator_follows_updates,
    check_generator_logprobs,
    check_generator_protocol,
    check_generator_samples,
)

sys.path.insert(0, str(Path(__file__).parents[2] / "accelerate" / "trainers"))
import grpo_setup  # noqa: E402
import walks_setup  # noqa: E402

import rlkit_core as rlkit  # noqa: E402
from rlkit_vllm import checks  # noqa: E402
from rlkit_vllm.generator import VLLMGenerator  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)
PROMPTS = ["a", "bcd", "ef"]


def model_config(n_positions: int = 32) -> GPT2Config:
    return GPT2Config(n_layer=2, n_embd=128, n_head=2, n_positions=n_positions, vocab_size=len(walks_setup.TOKENIZER),
                      bos_token_id=1, eos_token_id=1, pad_token_id=0)


def grpo_run(tmp_path, n_positions: int = 32, **train):
    train = dict(dict(total_steps=2, generator="vllm", generator_kwargs=dict(kv_cache_mb=16)), **train)
    c = grpo_setup.config("grpo", tmp_path, train=train)
    c.model.model_path = model_config(n_positions)
    prompts = walks_setup.TASK.eval_prompts[:8]
    return rlkit.train(config=c, reward_fn=walks_setup.reward_fn, prompts=prompts, eval_prompts=prompts)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo")


@pytest.fixture(scope="module")
def trainer(run_folder):
    from accelerate.state import AcceleratorState, GradientState

    trainer = grpo_run(run_folder, total_steps=4)  # 2 steps a rollout phase: 2 phases
    yield trainer
    trainer.generator.close()
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_a_grpo_run_samples_through_vllm_and_ends_synced(trainer):
    """train.generator: vllm (the plugin's registered name) samples the rollouts and the
    evaluations; after 4 steps it holds the trained policy."""
    assert isinstance(trainer.generator, VLLMGenerator)
    check_generator_protocol(trainer.generator)
    assert trainer.generator.calls >= 3, trainer.generator.calls  # rollouts of 2 phases and an evaluation
    assert trainer.generator.version == trainer.iter_count == 4
    samples = check_generator_samples(trainer, PROMPTS)
    assert samples.logprobs is not None
    gap = check_generator_logprobs(trainer, PROMPTS)  # the weights first: a missed sync fails here
    assert gap < 1e-4


def test_the_run_logs_the_generators_logprob_gap_every_phase(trainer, run_folder):
    """Train/inference agreement as the run measured it: vLLM's log-probs of the sampled tokens
    against the trainer's forward, every rollout phase, within the kit's tolerance in fp32."""
    from rlkit_core.testing.engine import read_records

    phases = [r for r in read_records(run_folder) if r["kind"] == "rollout"]
    assert len(phases) >= 2, phases  # the second after two steps and their syncs
    assert all(p["policy/logprob_gap_max"] < 1e-4 for p in phases), [p["policy/logprob_gap_max"] for p in phases]


def test_greedy_samples_equal_the_engines_sampler(trainer):
    batch = trainer.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    greedy = dict(max_new_tokens=6, do_sample=False)
    ours = trainer.sample(batch["input_ids"], batch["attention_mask"], **greedy).ids
    theirs = trainer.engine.generate(batch["input_ids"], batch["attention_mask"], **trainer.generation_kwargs(**greedy))
    n = min(ours.shape[1], theirs.shape[1])
    assert torch.equal(ours[:, :n], theirs[:, :n]), (ours, theirs)


def test_after_k_steps_with_sync_the_logprobs_equal_the_trainers(trainer):
    """A prompt sampled before the steps is in vLLM's prefix cache: the sync must drop it."""
    check_generator_logprobs(trainer, PROMPTS)
    gap = check_generator_follows_updates(trainer, trainer.generator, PROMPTS, steps=3)
    assert gap < 1e-4


def test_a_skipped_sync_is_caught(trainer):
    stale = SkippedSync(trainer.generator, skip_version=trainer.iter_count + 2)
    try:
        with pytest.raises(AssertionError, match="log-probs differ"):
            check_generator_follows_updates(trainer, stale, PROMPTS, steps=2)
    finally:
        trainer.generator = stale.generator
        trainer.sync_generator(full=True)
    check_generator_logprobs(trainer, PROMPTS)


def test_what_it_cannot_do_is_a_one_line_error(trainer, monkeypatch):
    batch = trainer.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with pytest.raises(RlkitError, match="vllm has no Q-guided decoding"):
        trainer.generator.generate(batch["input_ids"], batch["attention_mask"], guidance=object(), max_new_tokens=2)
    with pytest.raises(RlkitError, match="does not take the generation setting.* num_beams; remove them"):
        trainer.generator.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=2, num_beams=2)
    assert trainer.generator.release_note and trainer.generator.release() is None  # CPU: no sleep mode
    monkeypatch.setattr(checks, "vllm_version", lambda: None)
    with pytest.raises(RlkitError, match=r"vllm needs vLLM, which is not installed; pip install 'rlkit-vllm\[cpu\]'"):
        checks.require_vllm()
    # last: a sync that fails half-way leaves the generator refusing to sample
    bad = WeightUpdate(version=99, weights=lambda: iter([("transformer.h.0.attn.c_attn.weight", torch.zeros(3))]))
    with pytest.raises(RlkitError, match="vllm failed to load the weights of step 99"):
        trainer.generator.update_weights(bad)
    with pytest.raises(RlkitError, match="step 99 .*unusable: resume the run from its last checkpoint"):
        trainer.generator.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=2)


def test_a_frozen_trunk_is_sent_once_and_the_trained_blocks_follow(tmp_path):
    """A frozen trunk (all but the last block): after the first (full) sync only that block and the final
    norm are sent, and vLLM's layerwise reload leaves the frozen layers as they are."""
    from accelerate.state import AcceleratorState, GradientState

    trainer = grpo_run(tmp_path, total_steps=1)
    try:
        sent = []
        generator = trainer.generator
        update = generator.update_weights

        def recording(u):
            names = [name for name, _ in u.weights()] if not u.full else None
            sent.append(names)
            update(u)

        for name, param in trainer.engine.unwrapped_model.named_parameters():  # freeze all but the last block
            param.requires_grad_(".h.1." in name or ".ln_f." in name or "v_head" in name)
        generator.update_weights = recording
        gap = check_generator_follows_updates(trainer, generator, PROMPTS, steps=2)
        assert gap < 1e-4
        partial = [names for names in sent if names is not None]
        trained = lambda n: ".h.1." in n or ".ln_f." in n  # noqa: E731
        assert partial and all(names and all(map(trained, names)) for names in partial), partial
    finally:
        trainer.generator.close()
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def test_the_prefix_cache_is_dropped_at_every_sync(tmp_path):
    """vLLM caches the KV of whole blocks of a prompt (32 tokens on CPU): a prompt sampled
    before a step must not reuse the old weights' KV after the sync (0.08 to 0.17 in log-prob without
    the reset, on this model)."""
    from accelerate.state import AcceleratorState, GradientState

    trainer = grpo_run(tmp_path, n_positions=64, total_steps=1,
                       generator_kwargs=dict(kv_cache_mb=16, block_size=32, enable_prefix_caching=True))
    try:
        long_prompt = ["abcdefghij" * 4]  # 40 bytes: one whole cached block
        check_generator_logprobs(trainer, long_prompt)  # now in the prefix cache
        gap = check_generator_follows_updates(trainer, trainer.generator, long_prompt, steps=2)
        assert gap < 1e-4
    finally:
        trainer.generator.close()
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def test_a_ppo_run_with_a_value_head_starts_vllm_and_samples_through_it(tmp_path):
    """PPO's export holds value_head.safetensors beside the language model: vLLM loads every
    safetensors file of its folder, and stopped at start ("no module or parameter named 'v_head'")."""
    from accelerate.state import AcceleratorState, GradientState

    c = walks_setup.config("ppo", tmp_path, train=dict(total_steps=2, generator="vllm",
                                                       generator_kwargs=dict(kv_cache_mb=16)))
    c.model.model_path = model_config()
    prompts = walks_setup.TASK.eval_prompts[:8]
    trainer = rlkit.train(config=c, reward_fn=walks_setup.reward_fn, prompts=prompts, eval_prompts=prompts)
    try:
        assert isinstance(trainer.generator, VLLMGenerator)
        assert trainer.iter_count == 2
        assert check_generator_logprobs(trainer, PROMPTS) < 1e-4  # and synced after the steps
    finally:
        trainer.generator.close()
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def test_vllm_runs_eager_unless_the_generator_kwargs_turn_compilation_on(tmp_path, monkeypatch):
    """torch.compile's warm-up costs minutes on CPU at each start, so eager is the default; a
    user's ``enforce_eager: false`` reaches vLLM (compiled decode: bench/vllm_sampling.py)."""
    import json

    import vllm

    from rlkit_vllm.sampler import VLLMSampler

    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32", "n_positions": 32}))
    seen = []

    class Started(Exception):
        pass

    def recording_llm(**kwargs):
        seen.append(kwargs)
        raise Started

    monkeypatch.setattr(vllm, "LLM", recording_llm)
    for kwargs in ({}, {"enforce_eager": False}):
        with pytest.raises(Started):
            VLLMSampler(tmp_path, **kwargs)
    assert [k["enforce_eager"] for k in seen] == [True, False]
