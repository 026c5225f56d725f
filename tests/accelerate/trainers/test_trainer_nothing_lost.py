"""Issue 16 end to end on the real loop and engine (the unit tests of rlkit_methods.loop test
the pieces): a second run into a used folder changes nothing of the first, a PPO reward of
1e308 still returns the trainer and its report, a metric function of the wrong shape is one
line naming it, resuming a finished run takes no step and says so, and SIGINT/SIGTERM stop at
the next step with a checkpoint that resumes."""

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_methods.run.checkpoint import is_complete
from rlkit_methods.run.metrics_log import read_metrics
from walks_setup import run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

HERE = Path(__file__).parent


def contents(root: Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_second_run_into_a_used_folder_changes_nothing_of_the_first(tmp_path):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2)))
    ckpts = tmp_path / "ckpts"
    before = contents(ckpts)
    with pytest.raises(ConfigError) as error:
        run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2, seed=8)))
    assert str(error.value).startswith(f"train.checkpoint_dir: {ckpts} holds another run's files (checkpoint_2, checkpoint_4")
    assert contents(ckpts) == before  # nothing truncated, overwritten or left behind (no lock)
    replaced = run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2, checkpoint_interval=2, seed=8,
                                                                     overwrite_checkpoint_dir=True)))
    assert replaced.iter_count == 2 and not (ckpts / "checkpoint_4").exists()  # asked for: the old run is gone


def test_a_ppo_reward_of_1e308_returns_the_trainer_and_its_report(tmp_path):
    trainer = run("ppo", tmp_path, reward_fn=lambda samples, **kw: [1e308] * len(samples),
                  config_overrides=dict(train=dict(total_steps=4, eval_interval=2)))
    assert trainer.iter_count == 4  # not lost to a crash in the end-of-run report
    evals = [r["reward/mean"] for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "eval"]
    assert len(evals) == 3 and all(v > 1e307 for v in evals)  # logged as what they are (the mean overflows to inf)
    assert (tmp_path / "ckpts" / "report.png").is_file()


def test_a_metric_function_of_the_wrong_shape_is_one_line_naming_it(tmp_path):
    def lengths(samples, **kwargs):
        return {"lengths": [1.0, 2.0]}

    with pytest.raises(RlkitError) as error:
        run("sft", tmp_path, metric_fn=lengths)
    assert str(error.value) == ("metric function test_a_metric_function_of_the_wrong_shape_is_one_line_naming_it.<locals>.lengths: "
                                "metric 'lengths' has 2 values for 8 samples; return one per sample")


def test_resuming_a_finished_run_takes_no_step_and_says_so(tmp_path):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2)))
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("rlkit_methods.loop.trainer")
    logger.addHandler(handler)
    try:
        ckpts = tmp_path / "ckpts"
        resumed = run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2,
                                                                        resume_from_checkpoint=str(ckpts))))
    finally:
        logger.removeHandler(handler)
    assert resumed.iter_count == 4 and not (ckpts / "checkpoint_5").exists()
    assert [r["step"] for r in read_metrics(ckpts / "logs") if r["kind"] == "train"] == [1, 2, 3, 4]
    assert [r.getMessage() for r in records] == [f"{ckpts / 'checkpoint_4'} is at step 4, train.total_steps is 4: "
                                                 f"nothing left to train; raise train.total_steps to train further"]


INTERRUPTED = """
import sys
sys.path.insert(0, {here!r})
from pathlib import Path
from rlkit_core import hookimpl
from rlkit_core.errors import RunInterrupted
from walks_setup import run

class Started:
    @hookimpl
    def rlkit_step_end(self, step):
        if step == 2:
            print("training", flush=True)

try:
    run("sft", Path({tmp!r}), plugins=[Started()], config_overrides=dict(train=dict(total_steps=100000, checkpoint_interval=1000)))
except RunInterrupted as exc:
    print(exc, file=sys.stderr)
    sys.exit(exc.exit_code)
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_real_loop_at_the_next_step_with_a_checkpoint_that_resumes(tmp_path, signum, code):
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED.format(here=str(HERE), tmp=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, RLKIT_PROGRESS="0"))
    assert proc.stdout.readline().strip() == "training"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err[-2000:]
    saved = [p for p in (tmp_path / "ckpts").glob("checkpoint_*")]
    assert len(saved) == 1 and is_complete(saved[0]), saved
    step = int(saved[0].name.split("_")[1])
    assert err.strip().splitlines()[-1] == (f"interrupted by {signal.Signals(signum).name} at step {step}; checkpoint written "
                                            f"to {saved[0]}; resume with train.resume_from_checkpoint={saved[0]}")
    resumed = run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=step + 2, checkpoint_interval=1000,
                                                                    resume_from_checkpoint=str(saved[0]))))
    assert resumed.iter_count == step + 2
    assert [r["step"] for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"] == list(range(1, step + 3))
