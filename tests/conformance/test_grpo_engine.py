"""The engine conformance kit (rlkit_core.testing.engine) for GRPO and RLOO on the accelerate
engine: lifecycle hooks and metrics, exact resume, an HF export that plain transformers loads
and that generates what the trainer generates. tests/nemo/megatron/test_nemo_grpo.py trains
the same methods on the NeMo engine."""

import sys
from pathlib import Path

import pytest

from rlkit_core.testing.engine import check_engine_protocol, check_exact_resume, check_export_generates, check_lifecycle

sys.path.insert(0, str(Path(__file__).parents[1] / "accelerate" / "trainers"))
import grpo_setup  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

LOSS_KEY = "losses/total_loss"


def run(method, folder, overrides=None, plugins=(), **train_kwargs):
    from accelerate.state import AcceleratorState, GradientState

    try:
        return grpo_setup.run(method, folder, config_overrides=overrides, plugins=list(plugins), **train_kwargs)
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_lifecycle_metrics_and_checkpoints(method, tmp_path):
    calls = check_lifecycle(run, method, tmp_path, loss_key=LOSS_KEY)
    rollouts = [kw["stats"] for name, kw in calls if name == "rlkit_rollouts_made"]
    assert rollouts and all({"rollout_scores/mean", "time/rollout_generate", "time/rollout_score"} <= set(s) for s in rollouts)


@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_exact_resume(method, tmp_path):
    # 16 rollouts in steps of 8: two steps per phase, so pi_old and (beta > 0) the reference are stored
    check_exact_resume(run, method, tmp_path, steps=6, loss_key=LOSS_KEY)


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_export_generates_what_the_trainer_generates(beta, tmp_path):
    trainer = run("grpo", tmp_path, overrides=dict(train=dict(total_steps=2), method=dict(beta=beta)))
    check_engine_protocol(trainer.engine)
    check_export_generates(trainer, tmp_path / "export", ["a", "bcd"])
    assert not (tmp_path / "export" / "value_head.safetensors").exists()  # no heads to save
