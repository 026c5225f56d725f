"""Resume edge cases: another batch_size, seed or architecture is refused in one line, a
finished run has nothing left to train (issue 16, items 6 and 7; the removed COMPLETE
marker is in test_rundir.py)."""

from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.errors import ConfigError
from rlkit_methods.run.resume import check_resume_config, finished_message, steps_left

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml"
TINY = {"model.model_path": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64}}


def saved_checkpoint(tmp_path, rlkit_host, **overrides):
    config = load_config(SFT, {**TINY, **overrides})
    folder = tmp_path / "checkpoint_4"
    folder.mkdir()
    config.save_yaml(folder / "config.yml")
    return folder


def test_the_same_config_and_a_longer_run_resume(tmp_path, rlkit_host):
    folder = saved_checkpoint(tmp_path, rlkit_host)
    check_resume_config(folder, load_config(SFT, TINY))
    check_resume_config(folder, load_config(SFT, {**TINY, "train.total_steps": 999, "train.eval_interval": 3}))
    # the same batches laid out otherwise (packed bins, micro-batches by a token budget) train the same
    check_resume_config(folder, load_config(SFT, {**TINY, "train.packing": True, "train.minibatch_tokens": 512}))


def test_a_changed_learning_setting_is_still_refused_beside_a_layout_change(tmp_path, rlkit_host):
    folder = saved_checkpoint(tmp_path, rlkit_host)
    with pytest.raises(ConfigError, match=r"differs from .* in what changes the run: train.seq_length: 7 \(checkpoint: "):
        check_resume_config(folder, load_config(SFT, {**TINY, "train.packing": True, "train.seq_length": 7}))


@pytest.mark.parametrize("change, expected", [
    ({"train.batch_size": 3}, "train.batch_size: 3, but {ckpt} was trained with 100 (the loop position counts batches of that size); "
                              "resume with train.batch_size=100, or start a new run"),
    ({"train.seed": 7}, "train.seed: 7, but {ckpt} was trained with 1000"),
    ({"model.model_path": {**TINY["model.model_path"], "n_layer": 3}},
     "model.model_path: n_layer differ from {ckpt}'s model (n_layer=2); its weights do not fit another architecture"),
])
def test_a_resume_that_changes_what_the_checkpoint_means_is_one_line(tmp_path, rlkit_host, change, expected):
    folder = saved_checkpoint(tmp_path, rlkit_host)
    with pytest.raises(ConfigError) as error:
        check_resume_config(folder, load_config(SFT, {**TINY, **change}))
    assert str(error.value).startswith(expected.format(ckpt=folder))
    assert len(error.value.errors) == 1


def test_a_finished_run_has_no_step_left():
    assert steps_left(6, 6) == 0 and steps_left(8, 6) == 0 and steps_left(4, 6) == 2
    assert finished_message("ckpts/checkpoint_6", 6, 6) == (
        "ckpts/checkpoint_6 is at step 6, train.total_steps is 6: nothing left to train; raise train.total_steps to train further")
