"""The cross-engine kit's own behaviour (rlkit_core.testing.cross_engine), without an engine:
a trainer prepared by train() up to learn, and records compared within a tolerance. The kit
on real engines is tests/nemo/megatron/test_cross_engine.py."""

import pytest
import torch

from rlkit_core import TRLConfig
from rlkit_core.testing import RecordingObserver, config_dict, constant_reward
from rlkit_core.testing.cross_engine import compare_records, differences, prepared_trainer


def test_a_prepared_trainer_has_its_data_and_took_no_step(fake_host):
    observer = RecordingObserver()
    trainer = prepared_trainer(config=TRLConfig.from_dict(config_dict()), reward_fn=constant_reward(), prompts=["a", "b"],
                               plugins=[observer])
    assert trainer.prompt_pipeline.prompts == ["a", "b"] and trainer.experience  # rollouts made
    assert trainer.steps == 0 and "rlkit_step_end" not in observer.names()
    assert observer.calls[-1][0] == "rlkit_train_end" and observer.calls[-1][1]["error"] is not None  # no report
    assert "learn" not in vars(trainer)  # the class's learn is back: the trainer can still train
    trainer.learn()
    assert trainer.steps == 4


def record(loss=1.0, grad=0.5, weight=0.0, **extra_stats):
    stats = {"losses/total_loss": loss, "policy/grad_norm": grad, "time/forward": 3.0, **extra_stats}
    return {"stats": [stats], "outputs": {"logprobs": torch.zeros(2, 3)},
            "weights": {"model.safetensors:w": torch.full((2,), weight)}}


def test_records_agree_within_the_tolerance_over_the_names_both_hold():
    diffs = compare_records(record(**{"cpu/step": 1.0}), record(loss=1.0 + 1e-6, weight=2e-6, only_here=7.0, **{"cpu/step": 9.0}),
                            atol=5e-5)
    assert diffs["stats/1/losses/total_loss"] == pytest.approx(1e-6) and diffs["weights/model.safetensors:w"] == pytest.approx(2e-6)
    assert "stats/1/only_here" not in diffs and "stats/1/time/forward" not in diffs and "stats/1/cpu/step" not in diffs


def test_a_difference_beyond_the_tolerance_names_the_quantities_largest_first():
    with pytest.raises(AssertionError) as error:
        compare_records(record(), record(loss=1.1, weight=0.004), atol=5e-5)
    assert str(error.value).startswith("2 quantities differ by more than 5e-05: stats/1/losses/total_loss 0.1, weights/")


def test_records_without_a_common_loss_or_outputs_are_refused():
    with pytest.raises(AssertionError, match="no loss both engines report"):
        differences(record(), {**record(), "stats": [{"policy/grad_norm": 0.5}]})
    with pytest.raises(AssertionError, match="shape"):
        differences(record(), {**record(), "outputs": {"logprobs": torch.zeros(2, 4)}})
