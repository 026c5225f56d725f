"""The nemo backend's trainers are registered under trlX's names, selecting one where
megatron-core is missing is one line saying what to install (the main venv's situation), and
the engine's process group does not outlive the script."""

import os
import subprocess
import sys

import pytest

from rlkit_core.errors import ConfigError


def test_nemo_trainers_are_registered_for_their_methods(rlkit_host):
    registry = rlkit_host.registry
    names = ("NeMoPPOTrainer", "NeMoILQLTrainer", "NeMoSFTTrainer", "NeMoRFTTrainer", "NeMoGRPOTrainer", "NeMoRLOOTrainer")
    found = {name: registry.find("trainer", name) for name in names}
    assert {n: (s.backend, s.method) for n, s in found.items()} == {
        "NeMoPPOTrainer": ("nemo", "ppo"), "NeMoILQLTrainer": ("nemo", "ilql"), "NeMoSFTTrainer": ("nemo", "sft"),
        "NeMoRFTTrainer": ("nemo", "rft"), "NeMoGRPOTrainer": ("nemo", "grpo"), "NeMoRLOOTrainer": ("nemo", "rloo"),
    }


def test_selecting_a_nemo_trainer_without_megatron_says_what_to_install(rlkit_host, monkeypatch):
    import rlkit_core
    from rlkit_methods import default_ilql_config

    monkeypatch.setitem(sys.modules, "megatron", None)  # import megatron.core -> ImportError
    monkeypatch.setitem(sys.modules, "megatron.core", None)
    config = default_ilql_config().evolve(train=dict(trainer="NeMoILQLTrainer", trainer_kwargs={"megatron_cfg": "megatron_tiny_cpu.yaml"}))
    with pytest.raises(ConfigError) as err:
        rlkit_core.train(samples=["ab", "cd"], rewards=[1.0, 0.0], config=config)
    message = str(err.value)
    assert message.startswith("train.trainer: NeMoILQLTrainer needs megatron-core") and "install rlkit-nemo[nemo]" in message
    assert "\n" not in message


def test_trainers_import_from_the_package_root():
    from rlkit_nemo import NeMoGRPOTrainer, NeMoILQLTrainer, NeMoPPOTrainer, NeMoRFTTrainer, NeMoRLOOTrainer, NeMoSFTTrainer

    trainers = (NeMoPPOTrainer, NeMoILQLTrainer, NeMoSFTTrainer, NeMoRFTTrainer, NeMoGRPOTrainer, NeMoRLOOTrainer)
    assert [c.__name__ for c in trainers] == [
        "NeMoPPOTrainer", "NeMoILQLTrainer", "NeMoSFTTrainer", "NeMoRFTTrainer", "NeMoGRPOTrainer", "NeMoRLOOTrainer"]


def test_the_engines_process_group_is_destroyed_when_the_script_ends():
    """Left to the interpreter's finalisation, gloo's group can abort a finished run."""
    script = ("import atexit, torch.distributed as dist\n"
              "atexit.register(lambda: print('initialized at exit:', dist.is_initialized()))\n"
              "from rlkit_nemo.engine import init_distributed\n"
              "init_distributed()\n"
              "assert dist.is_initialized()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "initialized at exit: False" in result.stdout
