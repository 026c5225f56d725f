"""Messages that name the file or function and say what to do: config files that are not
UTF-8 text, truncated checkpoint files, rewards on the meta device (issue 16, item 6)."""

import codecs

import pytest
import torch
import yaml

from rlkit_core.cli import main
from rlkit_core.config import read_yaml
from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.testing import config_dict
from rlkit_methods.common.validate import check_scores
from rlkit_methods.run.checkpoint import damaged_files, read_errors


def test_a_utf16_config_from_a_windows_editor_loads(tmp_path):
    path = tmp_path / "config.yml"
    path.write_bytes(codecs.BOM_UTF16_LE + "train:\n  seq_length: 3  # é\n".encode("utf-16-le"))
    assert read_yaml(path) == {"train": {"seq_length": 3}}


@pytest.mark.parametrize("content, expected", [
    (bytes(range(128, 256)), "not a text file in UTF-8 (byte 0x80 at offset 0); save the config as UTF-8 YAML"),
    (b"train:\x00\n", "holds NUL bytes, so it is not a YAML text file"),
    (codecs.BOM_UTF16_LE + b"\x00\xd8", "not a text file in UTF-8"),  # a lone surrogate: broken UTF-16
], ids=["binary", "nul", "broken-utf16"])
def test_a_binary_config_file_is_one_line_naming_it(fake_methods_host, tmp_path, capsys, content, expected):
    path = tmp_path / "model.bin.yml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="model.bin.yml: "):
        read_yaml(path)
    assert main(["config", "validate", str(path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and (expected in lines[0] or "UTF-8" in lines[0]), lines


@pytest.fixture
def fake_methods_host(rlkit_bare_host):
    from rlkit_core.testing import FakePlugin

    rlkit_bare_host.register(FakePlugin(), "fakes", source="test")
    return rlkit_bare_host


def checkpoint_with(tmp_path):
    from safetensors.torch import save_file

    folder = tmp_path / "checkpoint_2"
    (folder / "accelerate").mkdir(parents=True)
    save_file({"w": torch.ones(64, 64)}, folder / "accelerate" / "model.safetensors")
    torch.save({"step": 2, "m": torch.zeros(256)}, folder / "accelerate" / "optimizer.bin")
    (folder / "scheduler.json").write_text('{"last_epoch": 2}')
    return folder


@pytest.mark.parametrize("name, load", [
    ("accelerate/model.safetensors", lambda p: __import__("safetensors.torch").torch.load_file(p)),
    ("accelerate/optimizer.bin", lambda p: torch.load(p, weights_only=True)),
    ("scheduler.json", lambda p: __import__("json").loads(p.read_text())),
])
def test_a_truncated_checkpoint_file_is_named(tmp_path, name, load):
    folder = checkpoint_with(tmp_path)
    assert damaged_files(folder) == []
    path = folder / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RlkitError) as error:
        with read_errors(folder):
            load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "resume from an earlier one" in message and len(message.splitlines()) == 1


def test_a_failure_that_is_not_a_damaged_file_passes_unchanged(tmp_path):
    folder = checkpoint_with(tmp_path)
    with pytest.raises(RuntimeError, match="size mismatch"):
        with read_errors(folder):
            raise RuntimeError("size mismatch for w: copying a param with shape [64, 64] ...")


def test_a_reward_on_the_meta_device_is_one_line():
    with pytest.raises(ValueError, match="reward function returned a tensor on the meta device"):
        check_scores(torch.zeros(3, device="meta"), 3)
    with pytest.raises(ValueError, match=r"reward function: score 0 is a tensor on the meta device .* return numbers"):
        check_scores([torch.tensor(1.0, device="meta")] * 3, 3)
    assert check_scores(torch.tensor([1.0, 2.0]), 2) == [1.0, 2.0]


def test_a_key_given_twice_in_a_config_is_refused_and_merge_keys_still_work(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("optimizer:\n  kwargs:\n    lr: 1.0e-4\n    lr: 3.0e-3\n")
    with pytest.raises(ConfigError, match=r"config.yml: invalid YAML: line 4, column 5: key 'lr' appears twice in one mapping \(first on line 3\); keep one"):
        read_yaml(path)
    path.write_text("base: &base {lr: 1.0, eps: 2.0}\noptimizer:\n  <<: *base\n  lr: 3.0\n")
    assert read_yaml(path)["optimizer"] == {"lr": 3.0, "eps": 2.0}


@pytest.mark.parametrize("returned, expected", [
    ([0.5, 0.5, 0.5], "metric function my_metric returned list; return a dict of name -> list of numbers"),
    (None, "metric function my_metric returned NoneType; return a dict of name -> list of numbers"),
    ({"len": [1.0, 2.0]}, "metric function my_metric: metric 'len' has 2 values for 3 samples; return one per sample"),
    ({"mood": ["good", "bad", "ok"]}, "metric function my_metric: metric 'mood' holds non-numbers; return numbers"),
], ids=["a list", "None", "the wrong count", "strings"])
def test_a_metric_function_of_the_wrong_shape_is_one_line_naming_it(returned, expected):
    from rlkit_core.errors import RlkitError
    from rlkit_methods.loop.evaluation import check_metrics

    def my_metric(samples, **kwargs):
        return returned

    with pytest.raises(RlkitError) as error:
        check_metrics(my_metric([]), my_metric, 3)
    assert str(error.value) == expected.replace("my_metric", my_metric.__qualname__)  # named as Python names it


def test_a_metric_of_nan_is_kept_as_nan():
    import math

    from rlkit_methods.loop.evaluation import check_metrics

    assert math.isnan(check_metrics({"m": [math.nan] * 3}, lambda samples: None, 3)["m"][1])
