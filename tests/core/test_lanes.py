"""The fast lane's rule (rlkit_core.testing.lanes): a test that starts a real training run
and is not marked slow fails, naming what it started; marked tests, fake runs and other
subprocesses pass. Checked on a suite of its own, in a pytest subprocess."""

import subprocess
import sys

import pytest

from rlkit_core.testing.lanes import launched_run

SUITE = '''
import subprocess, sys
import pytest
import rlkit_core as rlkit
from rlkit_core import TRLConfig
from rlkit_core.testing import FakePlugin, FakeTrainer, config_dict, constant_reward


@pytest.fixture
def host(rlkit_bare_host):
    rlkit_bare_host.register(FakePlugin(), "fakes", source="test")


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setattr(FakeTrainer, "engine", object(), raising=False)  # a trainer with an engine: a real run


def run():
    rlkit.train(config=TRLConfig.from_dict(config_dict()), reward_fn=constant_reward(), prompts=["a"])


def test_unmarked_training(host, engine):
    run()


@pytest.mark.slow
def test_marked_training(host, engine):
    run()


def test_a_fake_run_without_an_engine(host):
    run()


def test_unmarked_torchrun():
    with pytest.raises(OSError):
        subprocess.run(["/nonexistent/torchrun", "--nproc_per_node", "2", "worker.py"])


def test_another_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.fixture
def trained(host, engine):
    run()


def test_training_in_a_fixture(trained):
    pass
'''


def test_unmarked_runs_fail_and_marked_ones_pass(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "rlkit_core.testing", "-p", "rlkit_core.testing.lanes",
                             "-p", "no:cacheprovider", "-W", "ignore", "-m", "", str(tmp_path / "test_suite.py")],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = result.stdout
    assert "2 failed, 3 passed, 1 error" in out, out[-3000:]  # the fixture's run: an error at set-up
    failed = sorted(line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith(("FAILED", "ERROR")))
    assert failed == ["test_training_in_a_fixture", "test_unmarked_torchrun", "test_unmarked_training"], out[-3000:]
    assert ("test_unmarked_training starts a real training run (rlkit.train with FakeTrainer on object) but is not "
            "marked slow: add @pytest.mark.slow (the fast lane, pytest -m 'not slow', leaves it out)") in out
    assert "test_unmarked_torchrun starts a real training run (torchrun)" in out


@pytest.mark.parametrize("args, what", [
    (["torchrun", "--nproc_per_node", "2", "w.py"], "torchrun"),
    (["/venv/bin/python", "-m", "torch.distributed.run", "w.py"], "torchrun"),
    (["/venv/bin/accelerate", "launch", "train.py"], "accelerate launch"),
    (["/venv/bin/rlkit", "run", "--set", "train.total_steps=2"], "rlkit run"),
    (["python3", "-m", "rlkit_core", "run", "c.yml"], "rlkit run"),
    ("rlkit --quiet run c.yml", "rlkit run"),
    (["python", "/repo/tests/accelerate/trainers/ddp_walks.py", "ppo"], "the script /repo/tests/accelerate/trainers/ddp_walks.py"),
    (["rlkit", "config", "validate", "c.yml"], None),
    (["python", "-m", "rlkit_core", "--version"], None),
    (["python", "-c", "print(1)"], None),
    (["bash", "dev.sh", "demo"], None),
])
def test_what_counts_as_launching_a_run(args, what):
    assert launched_run(args) == what
