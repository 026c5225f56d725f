"""One test per hook spec (the meta-test at the end keeps it so), and the docs check."""

import inspect
import re
from pathlib import Path

import pytest

from rlkit_core import BackendSpec, GeneratorSpec, MethodSpec, PipelineSpec, RewardSpec, TRLConfig, TrainerSpec, hookimpl, hookspecs, train
from rlkit_core.cli import main
from rlkit_core.testing import FakeMethodConfig, FakeTrainer, RecordingObserver, config_dict

ROOT = Path(__file__).resolve().parents[2]


def hook_specs():
    return [
        (name, fn)
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(fn, "rlkit_spec")
    ]


def _run(observer, **config_sections):
    config = TRLConfig.from_dict(config_dict(**config_sections))
    return train(reward_fn=lambda samples, **kw: [1.0] * len(samples), config=config, plugins=[observer])


# --- registration hooks --------------------------------------------------------------------


def test_hook_rlkit_register_methods(rlkit_bare_host, register_plugin):
    class Methods:
        @hookimpl
        def rlkit_register_methods(self):
            return [MethodSpec("dpo", FakeMethodConfig, mode="offline", aliases=["DPOConfig"])]

    register_plugin(Methods())
    spec = rlkit_bare_host.registry.get("method", "dpoconfig")
    assert (spec.name, spec.mode) == ("dpo", "offline")


def test_hook_rlkit_register_backends(rlkit_bare_host, register_plugin):
    class Backend:
        @hookimpl
        def rlkit_register_backends(self):
            return [BackendSpec("tpu", trainers=[TrainerSpec("TpuPPOTrainer", "pkg.mod:TpuPPOTrainer", method="ppo")])]

    register_plugin(Backend())
    trainer = rlkit_bare_host.registry.get("trainer", "TpuPPOTrainer")
    assert (trainer.backend, trainer.method, trainer.target) == ("tpu", "ppo", "pkg.mod:TpuPPOTrainer")
    assert rlkit_bare_host.registry.names("backend") == ["tpu"]


def test_hook_rlkit_register_pipelines(rlkit_bare_host, register_plugin):
    class Pipelines:
        @hookimpl
        def rlkit_register_pipelines(self):
            return [PipelineSpec("Tokenizing", dict, kind="prompt"), PipelineSpec("numbers", lambda n=3: list(range(n)))]

    register_plugin(Pipelines())
    registry = rlkit_bare_host.registry
    assert registry.get("pipeline", "tokenizing").kind == "prompt"
    assert registry.get("pipeline", "numbers", where=lambda s: s.kind == "source").target(n=2) == [0, 1]
    with pytest.raises(LookupError):
        registry.get("pipeline", "Tokenizing", where=lambda s: s.kind == "source")


def test_hook_rlkit_register_rewards(rlkit_bare_host, register_plugin):
    class Rewards:
        @hookimpl
        def rlkit_register_rewards(self):
            return [RewardSpec("length", lambda: lambda samples, **kw: [len(s) for s in samples]),
                    RewardSpec("exact", lambda: None, kind="metric")]

    register_plugin(Rewards())
    registry = rlkit_bare_host.registry
    assert registry.get("reward", "length").target()(samples=["ab"]) == [2]
    assert registry.get("reward", "exact").kind == "metric"


def test_hook_rlkit_register_generators(rlkit_bare_host, register_plugin):
    class Generators:
        @hookimpl
        def rlkit_register_generators(self):
            return [GeneratorSpec("copy", "rlkit_core.testing.generator:HFCopyGenerator", description="a copy")]

    register_plugin(Generators())
    spec = rlkit_bare_host.registry.get("generator", "Copy")
    assert spec.factory.endswith(":HFCopyGenerator") and rlkit_bare_host.registry.names("generator") == ["copy"]


def test_hook_rlkit_register_commands(rlkit_bare_host, register_plugin, capsys):
    import typer

    class Commands:
        @hookimpl
        def rlkit_register_commands(self, app):
            @app.command("hello-plugin")
            def hello(name: str = typer.Argument("world")):
                typer.echo(f"hello {name}")

    register_plugin(Commands())
    from rlkit_core.cli import app

    try:
        assert main(["hello-plugin", "rlkit"]) == 0
        assert capsys.readouterr().out.strip() == "hello rlkit"
    finally:
        app.registered_commands[:] = [c for c in app.registered_commands if c.name != "hello-plugin"]


# --- config checks -------------------------------------------------------------------------


def test_hook_rlkit_check_config(fake_host, register_plugin, capsys, tmp_path):
    import yaml

    from rlkit_core.cli import main

    class Checker:
        @hookimpl
        def rlkit_check_config(self, config):
            return [f"train.seed: {config.train.seed} is unlucky"] if config.train.seed == 13 else []

    register_plugin(Checker())
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config_dict(reward="constant")))
    assert main(["config", "validate", str(path)]) == 0
    assert main(["config", "validate", str(path), "--set", "train.seed=13"]) == 2
    assert "error: train.seed: 13 is unlucky" in capsys.readouterr().err


# --- lifecycle hooks -----------------------------------------------------------------------


def test_hook_rlkit_train_start(fake_host):
    observer = RecordingObserver()
    _run(observer)
    starts = [kw for name, kw in observer.calls if name == "rlkit_train_start"]
    assert len(starts) == 1 and starts[0]["config"].train.total_steps == 4 and starts[0]["is_main_process"]


def test_hook_rlkit_rollouts_made(fake_host):
    observer = RecordingObserver()
    _run(observer)
    assert [kw["step"] for name, kw in observer.calls if name == "rlkit_rollouts_made"] == [0]


def test_hook_rlkit_step_end(fake_host):
    observer = RecordingObserver()
    _run(observer, train={"total_steps": 3})
    steps = [kw for name, kw in observer.calls if name == "rlkit_step_end"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[2]["metrics"]["losses/total_loss"] == pytest.approx(1 / 3)


def test_hook_rlkit_evaluation_end(fake_host):
    observer = RecordingObserver()
    _run(observer, train={"total_steps": 3, "eval_interval": 3})
    evals = [kw for name, kw in observer.calls if name == "rlkit_evaluation_end"]
    assert len(evals) == 1 and evals[0]["step"] == 3
    assert evals[0]["samples"][0] == {"prompt": "<s>", "output": ""}


def test_hook_rlkit_checkpoint_saved(fake_host, register_plugin, tmp_path):
    observer = register_plugin(RecordingObserver())
    trainer = FakeTrainer(TRLConfig.from_dict(config_dict()))
    trainer.save(tmp_path)
    (name, kwargs), = [c for c in observer.calls if c[0] == "rlkit_checkpoint_saved"]
    assert kwargs["path"] == tmp_path / "checkpoint_0" and (kwargs["path"] / "config.yml").is_file()


def test_hook_rlkit_train_end(fake_host):
    observer = RecordingObserver()
    _run(observer)
    assert observer.calls[-1] == ("rlkit_train_end", {"error": None})


def test_an_implementation_may_take_a_subset_of_the_arguments(fake_host):
    class Partial:
        def __init__(self):
            self.steps = []

        @hookimpl
        def rlkit_step_end(self, step):
            self.steps.append(step)

    partial = Partial()
    _run(partial, train={"total_steps": 2})
    assert partial.steps == [1, 2]


# --- meta-tests ----------------------------------------------------------------------------


def test_every_hook_has_a_test_of_its_own():
    tests = set(re.findall(r"def (test_hook_\w+)\(", Path(__file__).read_text()))
    missing = [name for name, _ in hook_specs() if f"test_hook_{name}" not in tests]
    assert not missing, f"hooks without a test_hook_<name>: {missing}"
    assert len(hook_specs()) == 13


def test_every_hook_is_documented_with_its_exact_signature():
    docs = (ROOT / "docs" / "hooks.md").read_text()
    for name, fn in hook_specs():
        signature = f"def {name}({', '.join(inspect.signature(fn).parameters)}):"
        assert f"## {name}" in docs, f"docs/hooks.md has no section for {name}"
        assert signature in docs, f"docs/hooks.md lacks the signature {signature}"
