"""Exact resume, and atomic checkpoints under SIGKILL."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlkit_methods.run.checkpoint import is_complete, latest_checkpoint, resolve_resume_path
from rlkit_methods.run.metrics_log import read_metrics
from walks_setup import run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

HERE = Path(__file__).parent


def _train_records(path):
    return [r for r in read_metrics(path) if r["kind"] == "train"]


def _losses(records):
    return [{k: v for k, v in r.items() if k.startswith(("loss", "losses/", "policy/", "values/"))} for r in records]


@pytest.mark.parametrize("method, steps", [("ppo", 8), ("ilql", 6)])
def test_n_steps_straight_equal_half_resume_half(method, steps, tmp_path):
    half = steps // 2
    straight = run(method, tmp_path / "a", config_overrides=dict(train=dict(total_steps=steps, checkpoint_interval=half)))
    checkpoint = tmp_path / "a" / "ckpts" / f"checkpoint_{half}"
    assert is_complete(checkpoint)
    resumed = run(method, tmp_path / "b", config_overrides=dict(train=dict(total_steps=steps, checkpoint_interval=half,
                                                                          resume_from_checkpoint=str(checkpoint))))
    assert resumed.iter_count == steps
    a = _train_records(tmp_path / "a" / "ckpts" / "logs")
    b = _train_records(tmp_path / "b" / "ckpts" / "logs")
    assert [r["step"] for r in b] == list(range(half + 1, steps + 1))
    assert _losses(b) == _losses(a[half:])
    for (name, p), (_, q) in zip(straight.unwrapped_model.state_dict().items(), resumed.unwrapped_model.state_dict().items()):
        assert torch.equal(p, q), name


KILLER = """
import os, signal, sys
sys.path.insert(0, {here!r})
import rlkit_methods.run.checkpoint as checkpoint
real_commit = checkpoint.commit_temporary

def commit_or_die(final):
    if final.name == "checkpoint_4":  # everything is written, the rename has not happened
        os.kill(os.getpid(), signal.SIGKILL)
    return real_commit(final)

import rlkit_methods.loop.trainer as loop
loop.commit_temporary = commit_or_die
from pathlib import Path
from walks_setup import run
run("ilql", Path({tmp!r}), config_overrides=dict(train=dict(total_steps=6, checkpoint_interval=2)))
"""


def test_a_run_killed_while_checkpointing_resumes_from_the_last_complete_one(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLER.format(here=str(HERE), tmp=str(tmp_path)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    ckpts = tmp_path / "ckpts"
    assert (ckpts / ".tmp-checkpoint_4").is_dir()  # the half-written one is hidden ...
    assert not (ckpts / "checkpoint_4").exists()
    assert latest_checkpoint(ckpts) == ckpts / "checkpoint_2"  # ... and never picked
    assert resolve_resume_path(ckpts) == ckpts / "checkpoint_2"
    trainer = run("ilql", tmp_path, config_overrides=dict(train=dict(total_steps=6, checkpoint_interval=2, resume_from_checkpoint=str(ckpts))))
    assert trainer.iter_count == 6
    assert is_complete(ckpts / "checkpoint_4") and is_complete(ckpts / "checkpoint_6")
    assert not (ckpts / ".tmp-checkpoint_4").exists()  # stale temporaries are cleaned up
    assert [r["step"] for r in _train_records(ckpts / "logs")] == [1, 2, 3, 4, 5, 6]


def test_resume_from_a_missing_checkpoint_is_a_clear_error(tmp_path):
    from rlkit_core.errors import RlkitError

    with pytest.raises(RlkitError, match="no complete checkpoint"):
        run("sft", tmp_path, config_overrides=dict(train=dict(resume_from_checkpoint=str(tmp_path / "nothing"))))


class Boom:
    """A pickle that runs code when loaded: a shared checkpoint made to attack whoever resumes it."""

    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


@pytest.mark.parametrize("planted", ["accelerate/optimizer.bin", "accelerate/pytorch_model.bin", "loop_state_0.pt"])
def test_a_checkpoint_file_holding_code_is_refused_naming_it_and_nothing_runs(planted, tmp_path):
    """accelerate's load_state reads with weights_only=True but does not say which file it refused,
    and torch's message advises weights_only=False: the loop names the file and the call (issue 16, item 2)."""
    from rlkit_core.errors import RlkitError

    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2, checkpoint_interval=2)))
    checkpoint = tmp_path / "ckpts" / "checkpoint_2"
    mark = tmp_path / "pwned"
    torch.save({"state": {}, "evil": Boom(mark)}, checkpoint / planted)
    with pytest.raises(RlkitError) as error:
        run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2,
                                                              resume_from_checkpoint=str(checkpoint))))
    assert str(error.value) == (f"{checkpoint / planted}: refused, it holds objects that need code to load (posix.system); "
                                f"only load checkpoints written by rlkit")
    assert not mark.exists()  # nothing ran


@pytest.mark.parametrize("damaged", ["accelerate/optimizer.bin", "accelerate/pytorch_model.bin", "loop_state_0.pt"])
def test_a_truncated_checkpoint_file_is_named_on_resume(damaged, tmp_path):
    """The engine turned the torch error of a cut-short file into "does not fit this model"
    (a wrong diagnosis, no file named); the loop names the file (issue 16, item 6)."""
    from rlkit_core.errors import RlkitError

    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2, checkpoint_interval=2)))
    checkpoint = tmp_path / "ckpts" / "checkpoint_2"
    path = checkpoint / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RlkitError) as error:
        run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2,
                                                              resume_from_checkpoint=str(checkpoint))))
    message = str(error.value)
    assert message.startswith(f"{path}: truncated or not a torch file") and "does not fit" not in message, message
    assert message.endswith(f"checkpoint {checkpoint} cannot be loaded, resume from an earlier one") and "\n" not in message
