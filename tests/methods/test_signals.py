"""SIGINT/SIGTERM stop a run at the loop's next safe point with a checkpoint, one line and
exit 130/143; a second signal stops at once (issue 16, item 3)."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from rlkit_core.errors import RunInterrupted
from rlkit_core.testing import config_dict
from rlkit_methods.run.signals import stop_on_signals


def wait_for(stop, seconds=5.0):
    deadline = time.time() + seconds
    while not stop.requested and time.time() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("signum, name, code", [(signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)])
def test_the_first_signal_sets_the_flag_and_the_second_acts_at_once(signum, name, code):
    before = signal.getsignal(signum)
    with stop_on_signals() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signum)
        wait_for(stop)
        assert (stop.requested, stop.signal_name, stop.exit_code) == (True, name, code)
        error = stop.error(7, "ckpts/checkpoint_7")
        assert isinstance(error, RunInterrupted) and error.exit_code == code
        assert str(error) == f"interrupted by {name} at step 7; checkpoint written to ckpts/checkpoint_7; " \
                             f"resume with train.resume_from_checkpoint=ckpts/checkpoint_7"
        if signum == signal.SIGINT:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signum)
                time.sleep(1)
    assert signal.getsignal(signum) is before


LOOP_PLUGIN = """
import time
from pathlib import Path
from rlkit_core.testing.fakes import FakePlugin, FakeTrainer
from rlkit_methods.run.signals import stop_on_signals

_fakes = FakePlugin()
rlkit_register_methods = _fakes.rlkit_register_methods
rlkit_register_backends = _fakes.rlkit_register_backends
rlkit_register_pipelines = _fakes.rlkit_register_pipelines
rlkit_register_rewards = _fakes.rlkit_register_rewards

def learn(self):  # the loop's shape: work, then a safe point
    with stop_on_signals() as stop:
        for step in range(1, 10_000):
            time.sleep(0.05)
            if step == 2:
                print("training", flush=True)
            if stop.requested:
                checkpoint = Path({tmp!r}) / f"checkpoint_{{step}}"
                checkpoint.mkdir()
                raise stop.error(step, checkpoint)

FakeTrainer.learn = learn
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum, code, name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_rlkit_run_stops_at_a_safe_point_with_a_checkpoint_and_one_line(tmp_path, signum, code, name):
    (tmp_path / "loop_plugin.py").write_text(LOOP_PLUGIN.format(tmp=str(tmp_path)))
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(config_dict(reward="constant")))
    script = "import sys; from rlkit_core.cli import main; sys.argv[0] = 'rlkit'; main(sys.argv[1:])"
    env = dict(os.environ, RLKIT_DISABLE_PLUGINS="rlkit_accelerate,rlkit_nemo,rlkit_methods")
    proc = subprocess.Popen([sys.executable, "-c", script, "run", str(config), "--plugin", str(tmp_path / "loop_plugin.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "training"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: interrupted by {name} at step "), err
    step = int(lines[0].split("at step ")[1].split(";")[0])
    assert (tmp_path / f"checkpoint_{step}").is_dir() and "train.resume_from_checkpoint=" in lines[0]
