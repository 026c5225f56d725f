"""The loop's divergence stop (issue 32): the first NaN/inf loss or gradient norm stops the run
in one line naming the step, the quantity and the last checkpoint whose weights gave a finite
loss; the step's record is written; train.stop_on_nonfinite=false trains on."""

import math
from types import SimpleNamespace

import pytest
import torch

from rlkit_methods.run.divergence import Diverged, stop_if_diverged


def stub(tmp_path, step, enabled=True):
    for n in (1, 2, 3):
        (tmp_path / f"checkpoint_{n}").mkdir(exist_ok=True)
        (tmp_path / f"checkpoint_{n}" / "COMPLETE").write_text("ok\n")
    written = []
    return SimpleNamespace(
        config=SimpleNamespace(train=SimpleNamespace(stop_on_nonfinite=enabled)),
        engine=SimpleNamespace(all_reduce_sum=lambda t: t.clone()),
        metrics_log=SimpleNamespace(write=lambda *a: written.append(a)),
        checkpoint_dir=tmp_path, iter_count=step, written=written,
    )


def test_a_nan_loss_stops_at_that_step_naming_the_checkpoint_before_the_bad_weights(tmp_path):
    trainer = stub(tmp_path, 4)
    with pytest.raises(Diverged) as caught:
        stop_if_diverged(trainer, {"loss": math.nan, "lr": 1e-3})
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("step 4: loss is nan (the run diverged); stopped, the last finite checkpoint is ")
    assert line.split("checkpoint is ")[1].startswith(str(tmp_path / "checkpoint_2"))  # checkpoint_3's weights gave the NaN
    assert trainer.written and trainer.written[0][:2] == (4, "train")


def test_an_infinite_grad_norm_stops_too(tmp_path):
    with pytest.raises(Diverged, match=r"step 2: policy/grad_norm is inf .* no checkpoint before step 1 was saved"):
        stop_if_diverged(stub(tmp_path, 2), {"loss": 1.0, "policy/grad_norm": math.inf})


def test_finite_values_a_nan_reward_and_the_switch_off_go_on(tmp_path):
    stop_if_diverged(stub(tmp_path, 4), {"loss": 1.0, "grad_norm": 2.0})
    stop_if_diverged(stub(tmp_path, 4), {"loss": 1.0, "reward/mean": math.nan})
    stop_if_diverged(stub(tmp_path, 4, enabled=False), {"loss": math.nan})


def test_another_rank_diverging_stops_this_one(tmp_path):
    trainer = stub(tmp_path, 5)
    trainer.engine.all_reduce_sum = lambda t: t + torch.tensor([1.0])  # another rank saw a NaN
    with pytest.raises(Diverged, match="step 5: loss on another process is nan"):
        stop_if_diverged(trainer, {"loss": 0.5})
