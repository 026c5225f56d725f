"""``--set`` strings as Hydra writes them: a mapping value replaces the node, ``~KEY`` deletes it."""

import pytest
import yaml

from rlkit_core import ConfigError, load_config
from rlkit_core.testing import config_dict


@pytest.fixture
def with_prompts(tmp_path):
    path = tmp_path / "run.yml"
    prompts = {"pipeline": "in_memory", "kwargs": {"items": ["a", "b"], "words": 3}}
    path.write_text(yaml.safe_dump(config_dict(data={"prompts": prompts, "eval_prompts": "in_memory"})))
    return path


def test_a_mapping_value_replaces_the_whole_node(fake_host, with_prompts):
    # switching prompts to a file keeps none of the old pipeline's kwargs (they used to be merged in)
    config = load_config(with_prompts, ["data.prompts={path: prompts.txt}"])
    assert config.data.prompts.path == "prompts.txt"
    assert config.data.prompts.pipeline is None and config.data.prompts.kwargs == {}
    config = load_config(with_prompts, ["data.prompts={pipeline: in_memory, kwargs: {items: [c]}}"])
    assert config.data.prompts.kwargs == {"items": ["c"]}


def test_a_dotted_key_still_sets_one_value_and_items_apply_in_order(fake_host, with_prompts):
    config = load_config(with_prompts, ["data.prompts.kwargs.items=[z]"])
    assert config.data.prompts.kwargs == {"items": ["z"], "words": 3}
    # a shorthand set first can be reached into by the next item
    config = load_config(with_prompts, ["data.prompts=in_memory", "data.prompts.kwargs.items=[y]"])
    assert config.data.prompts.kwargs == {"items": ["y"]}


def test_tilde_deletes_a_node(fake_host, with_prompts):
    config = load_config(with_prompts, ["~data.prompts.kwargs.words"])
    assert config.data.prompts.kwargs == {"items": ["a", "b"]}
    config = load_config(with_prompts, ["~data.eval_prompts"])
    assert config.data.eval_prompts is None
    config = load_config(with_prompts, ["~data.prompts.kwargs", "data.prompts.kwargs.items=[q]"])
    assert config.data.prompts.kwargs == {"items": ["q"]}


def test_bad_deletes_and_paths_through_values_are_one_line_errors(fake_host, with_prompts):
    with pytest.raises(ConfigError, match=r"data.prompts.nope is not in the config, nothing to delete"):
        load_config(with_prompts, ["~data.prompts.nope"])
    with pytest.raises(ConfigError, match=r"expected ~KEY \(no value\)"):
        load_config(with_prompts, ["~data.prompts=x"])
    with pytest.raises(ConfigError, match=r"train.batch_size is a value .*, not a section"):
        load_config(with_prompts, ["train.batch_size.x=1"])


def test_python_mappings_still_deep_merge_as_trlx(fake_host, with_prompts):
    config = load_config(with_prompts, {"data.prompts": {"kwargs": {"items": ["m"]}}})
    assert config.data.prompts.kwargs == {"items": ["m"], "words": 3}
