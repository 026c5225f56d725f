"""The engine conformance kit (rlkit_core.testing.engine) on the accelerate engine, for every
method. The NeMo engine runs the same checks in tests/nemo/megatron (its own venv)."""

import sys
from pathlib import Path

import pytest

from rlkit_core.testing.engine import (
    check_engine_protocol,
    check_exact_resume,
    check_export_generates,
    check_lifecycle,
    check_raising_reward,
    check_stop_sequences,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "accelerate" / "trainers"))
import walks_setup  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

LOSS_KEY = {"ppo": "losses/total_loss", "ilql": "losses/loss", "sft": "loss"}


def run(method, folder, overrides=None, plugins=(), **train_kwargs):
    from accelerate.state import AcceleratorState, GradientState

    try:
        return walks_setup.run(method, folder, config_overrides=overrides, plugins=list(plugins), **train_kwargs)
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


@pytest.mark.parametrize("method", ["ppo", "ilql", "sft"])
def test_lifecycle_metrics_and_checkpoints(method, tmp_path):
    check_lifecycle(run, method, tmp_path, loss_key=LOSS_KEY[method])


@pytest.mark.parametrize("method", ["ppo", "ilql", "sft"])
def test_exact_resume(method, tmp_path):
    check_exact_resume(run, method, tmp_path, loss_key=LOSS_KEY[method])


@pytest.mark.parametrize("method", ["ppo", "sft"])
def test_export_generates_what_the_trainer_generates(method, tmp_path):
    trainer = run(method, tmp_path, overrides=dict(train=dict(total_steps=2)))
    check_engine_protocol(trainer.engine)
    check_export_generates(trainer, tmp_path / "export", ["a", "bcd"])


def test_stop_sequences_cut_outputs(tmp_path):
    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1)), stop_sequences=["##"])
    check_stop_sequences(trainer, "##")


def test_a_raising_reward_names_the_function_and_the_step(tmp_path):
    check_raising_reward(run, tmp_path)
