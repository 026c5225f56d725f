"""data.* as an inline YAML list: ``eval_prompts: [a, b]`` (no file, no pipeline)."""

import pytest
import yaml

from rlkit_core import ConfigError, load_config
from rlkit_core.run import load_source
from rlkit_core.testing import config_dict


def write(tmp_path, data):
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(config_dict(data=data)))
    return path


def test_a_list_is_the_items(fake_host, tmp_path):
    config = load_config(write(tmp_path, {"prompts": "in_memory", "eval_prompts": ["b", "c", {"prompt": "d", "label": 1}]}))
    source = config.data.eval_prompts
    assert source.items == ["b", "c", {"prompt": "d", "label": 1}] and source.pipeline is None
    assert load_source(source, fake_host.registry, "data.eval_prompts") == ["b", "c", {"prompt": "d", "label": 1}]
    # a --set list works the same way, and round-trips through the saved config
    config = load_config(write(tmp_path, {"prompts": "in_memory"}), ["data.eval_prompts=[x, y]"])
    assert config.data.eval_prompts.items == ["x", "y"]
    assert type(config).from_dict(config.to_dict()).data.eval_prompts.items == ["x", "y"]


def test_an_empty_list_or_items_with_kwargs_are_one_line_errors(fake_host, tmp_path):
    with pytest.raises(ConfigError, match="data.eval_prompts: items: the list is empty"):
        load_config(write(tmp_path, {"prompts": "in_memory", "eval_prompts": []}))
    with pytest.raises(ConfigError, match="data.eval_prompts: kwargs: not used with items"):
        load_config(write(tmp_path, {"prompts": "in_memory", "eval_prompts": {"items": ["a"], "kwargs": {"n": 1}}}))
