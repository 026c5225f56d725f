"""The vLLM generator in a process of its own (``train.generator_kwargs.placement: process``)
against the accelerate engine: the generator kit's checks across the process boundary, only the
trained blocks sent above a frozen trunk, and its faults (the process killed mid-run, vLLM
missing or unusable under the interpreter named, a load that fails), each one line with the
last checkpoint intact and resumable. The model and run are test_vllm_generator.py's."""

import os
import signal
import stat
import sys
from pathlib import Path

import pytest
import torch

from rlkit_core import hookimpl
from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import WeightUpdate
from rlkit_core.testing.generator import (
    SkippedSync,
    check_generator_follows_updates,
    check_generator_logprobs,
    check_generator_protocol,
    check_generator_samples,
)

from test_vllm_generator import PROMPTS, grpo_run

from rlkit_vllm.process import ProcessGenerator  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)
PROCESS = dict(placement="process", kv_cache_mb=16)


def reset_accelerate():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = grpo_run(tmp_path_factory.mktemp("grpo"), total_steps=4, generator_kwargs=PROCESS)
    yield trainer
    trainer.generator.close()
    reset_accelerate()


def test_a_grpo_run_samples_through_the_process_and_ends_synced(trainer):
    generator = trainer.generator
    assert isinstance(generator, ProcessGenerator) and generator.proc.poll() is None
    assert generator.proc.pid != os.getpid()
    check_generator_protocol(generator)
    assert generator.calls >= 3 and generator.version == trainer.iter_count == 4
    assert check_generator_samples(trainer, PROMPTS).logprobs is not None
    assert check_generator_logprobs(trainer, PROMPTS) < 1e-4


def test_after_k_steps_the_process_logprobs_equal_the_trainers(trainer):
    check_generator_logprobs(trainer, PROMPTS)
    assert check_generator_follows_updates(trainer, trainer.generator, PROMPTS, steps=3) < 1e-4


def test_a_skipped_sync_across_the_process_is_caught(trainer):
    stale = SkippedSync(trainer.generator, skip_version=trainer.iter_count + 2)
    try:
        with pytest.raises(AssertionError, match="log-probs differ"):
            check_generator_follows_updates(trainer, stale, PROMPTS, steps=2)
    finally:
        trainer.generator = stale.generator
        trainer.sync_generator(full=True)
    check_generator_logprobs(trainer, PROMPTS)


def test_weights_go_through_shared_memory_and_only_the_trained_blocks_after_a_frozen_trunk(trainer):
    """A frozen trunk: after the full sync only the last block and the final norm are written,
    their bytes and nothing else; the generator still follows the trained policy."""
    from rlkit_accelerate.generator import sampling_model

    lm = sampling_model(trainer.engine.unwrapped_model)
    try:
        trainer.sync_generator(full=True)
        everything = trainer.generator.last_sync
        for name, param in lm.named_parameters():
            param.requires_grad_(".h.1." in name or ".ln_f." in name)
        trained = [p for p in lm.parameters() if p.requires_grad]
        assert check_generator_follows_updates(trainer, trainer.generator, PROMPTS, steps=2) < 1e-4
        sent = trainer.generator.last_sync
        assert sent["tensors"] == len(trained) < everything["tensors"], (sent, everything)
        payload = sum(p.numel() * p.element_size() for p in trained)
        assert payload <= sent["bytes"] < payload + 64 * len(trained), (sent, payload)
        assert not list(Path(trainer.generator.shm_folder).glob(f"rlkit-vllm-{os.getpid()}-*.bin"))  # removed
    finally:
        for param in lm.parameters():
            param.requires_grad_(True)
        trainer.sync_generator(full=True)


def test_a_load_that_fails_is_one_line_and_the_generator_refuses_to_sample(trainer):
    generator = ProcessGenerator(trainer.engine, kv_cache_mb=16)
    batch = trainer.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    try:
        bad = WeightUpdate(version=99, weights=lambda: iter([("transformer.h.0.attn.c_attn.weight", torch.zeros(3))]))
        with pytest.raises(RlkitError, match="vllm failed to load the weights of step 99") as caught:
            generator.update_weights(bad)
        assert "\n" not in str(caught.value)
        with pytest.raises(RlkitError, match="step 99 .*unusable: resume the run from its last checkpoint"):
            generator.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=2)
    finally:
        generator.close()
    assert generator.proc.poll() is not None  # closed: the process ended


def test_a_process_that_stops_answering_is_stopped_after_timeout_s(trainer):
    """A hung server (stopped here) does not hang the run: the sync waits timeout_s, kills the
    process and stops with one line; the generator then refuses to sample."""
    generator = ProcessGenerator(trainer.engine, kv_cache_mb=16, timeout_s=3)
    os.kill(generator.proc.pid, signal.SIGSTOP)
    update = WeightUpdate(version=7, weights=lambda: trainer.engine.named_weights(trainable_only=True))
    with pytest.raises(RlkitError, match=r"did not answer the sync of step 7 within 3 s "
                                         r"\(train.generator_kwargs.timeout_s\) and was stopped") as caught:
        generator.update_weights(update)
    assert "\n" not in str(caught.value)
    assert generator.proc.wait(timeout=30) == -signal.SIGKILL
    batch = trainer.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with pytest.raises(RlkitError, match="did not answer the sync of step 7"):
        generator.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=2)
    generator.close()


class KillGenerator:
    """Kills the generator's process after a step's checkpoint."""

    def __init__(self, step):
        self.step = step

    @hookimpl
    def rlkit_step_end(self, trainer, step, metrics, is_main_process):
        if step == self.step:
            os.kill(trainer.generator.proc.pid, signal.SIGKILL)


def test_the_process_dying_mid_run_is_one_line_and_the_run_resumes(tmp_path):
    """Killed after step 2's checkpoint: the next phase's rollouts stop the run with one line
    naming the signal; checkpoint_2 is intact and a resumed run (a new process) ends at step 4."""
    import rlkit_core as rlkit
    import grpo_setup
    import walks_setup
    from test_vllm_generator import model_config

    def config(**train):
        c = grpo_setup.config("grpo", tmp_path, train=dict(total_steps=4, checkpoint_interval=1, generator="vllm",
                                                           generator_kwargs=PROCESS, **train))
        c.model.model_path = model_config()
        return c

    prompts = walks_setup.TASK.eval_prompts[:8]
    with pytest.raises(RlkitError) as caught:
        try:
            rlkit.train(config=config(), reward_fn=walks_setup.reward_fn, prompts=prompts, eval_prompts=prompts,
                        plugins=[KillGenerator(step=2)])
        finally:
            reset_accelerate()
    message = str(caught.value)
    assert "\n" not in message and "vllm's process" in message and "died during generate" in message, message
    assert "killed by SIGKILL" in message and "resume the run from its last checkpoint" in message, message
    checkpoints = tmp_path / "ckpts"
    assert (checkpoints / "checkpoint_2").is_dir() and not (checkpoints / "checkpoint_3").exists()
    try:
        trainer = rlkit.train(config=config(resume_from_checkpoint=str(checkpoints / "checkpoint_2")),
                              reward_fn=walks_setup.reward_fn, prompts=prompts, eval_prompts=prompts)
        assert trainer.iter_count == 4 and trainer.generator.version == 4
        assert check_generator_logprobs(trainer, PROMPTS) < 1e-4
        trainer.generator.close()
    finally:
        reset_accelerate()


def wrapper(tmp_path, python, pythonpath=None) -> str:
    """An interpreter as a script: ``python`` with ``pythonpath`` in front."""
    script = tmp_path / "python"
    env = f'PYTHONPATH="{pythonpath}${{PYTHONPATH:+:$PYTHONPATH}}" ' if pythonpath else ""
    script.write_text(f'#!/bin/sh\n{env}exec "{python}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_vllm_missing_under_the_interpreter_named_is_one_line(trainer, nemo_python):
    with pytest.raises(ConfigError, match="generator_kwargs.python: /no/such/python is not an executable"):
        ProcessGenerator(trainer.engine, python="/no/such/python")
    with pytest.raises(RlkitError, match=r"vllm needs vLLM, which is not installed; pip install .*\(the generator "
                                         rf"process runs {nemo_python}\)") as caught:
        ProcessGenerator(trainer.engine, python=str(nemo_python), kv_cache_mb=16)  # the NeMo venv: rlkit, no vLLM
    assert "\n" not in str(caught.value)


def test_a_vllm_it_cannot_use_under_the_interpreter_named_is_one_line(trainer, tmp_path):
    old = tmp_path / "old"  # a vLLM without in-place reload: an older release's layout
    (old / "vllm").mkdir(parents=True)
    (old / "vllm" / "__init__.py").write_text("class SamplingParams:\n    pass\n")
    with pytest.raises(RlkitError, match=r"vllm cannot use vllm(-cpu)? [0-9.]+ \(ModuleNotFoundError: No module "
                                         r"named 'vllm.model_executor'\); rlkit-vllm needs in-place weight reload"):
        ProcessGenerator(trainer.engine, python=wrapper(tmp_path, sys.executable, old), kv_cache_mb=16)


def test_asynchronous_rollouts_sample_through_the_process_beside_training(tmp_path):
    """The next phase sampled in a thread beside training, through the process: the weights of
    the phase's start reach it from that thread (test_vllm_async.py's run, placement: process)."""
    from rlkit_core.testing.engine import read_records

    trainer = None
    try:
        trainer = grpo_run(tmp_path, total_steps=6, async_rollouts=True, generator_kwargs=PROCESS)
        assert isinstance(trainer.generator, ProcessGenerator)
        phases = [r for r in read_records(tmp_path) if r["kind"] == "rollout"]
        assert [(r["async/staleness"], r["async/policy_version"]) for r in phases] == [(0, 0), (1, 0), (1, 2)]
        assert phases[0]["policy/logprob_gap_max"] < 1e-4
        assert trainer.generator.version == 4 and trainer.iter_count == 6
    finally:
        if trainer is not None:
            trainer.generator.close()
        reset_accelerate()
