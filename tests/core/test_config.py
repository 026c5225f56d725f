"""trlX-compatible config: loading, round trips, overrides and error reports."""

import attrs
import pytest
import yaml

from rlkit_core import ConfigError, TRLConfig, load_config
from rlkit_core.config import parse_set, unflatten
from rlkit_core.config.schema import TrainConfig
from rlkit_core.testing import FakeMethodConfig, config_dict

TRLX_YAML = """
train:
  seq_length: 1024
  epochs: 100
  total_steps: 10000
  batch_size: 32
  checkpoint_interval: 10000
  eval_interval: 100
  pipeline: "FakePromptPipeline"
  trainer: "FakeTrainer"
  save_best: False
  tracker: "tensorboard"
  logging_dir: "logs"
  seed: 1000
  minibatch_size: 8
model:
  model_path: "lvwerra/gpt2-imdb"
  num_layers_unfrozen: 2
tokenizer:
  tokenizer_path: "gpt2"
  truncation_side: "right"
optimizer:
  name: "adamw"
  kwargs:
    lr: 1.0e-4
    betas: [0.9, 0.95]
    eps: 1.0e-8
    weight_decay: 1.0e-6
scheduler:
  name: "cosine_annealing"
  kwargs:
    T_max: 10000
    eta_min: 1.0e-4
method:
  name: "FAKEMETHODCONFIG"
  num_rollouts: 128
  gamma: 0.99
  gen_kwargs:
    max_new_tokens: 40
    top_k: 0
    top_p: 1.0
    do_sample: True
"""


@pytest.fixture
def trlx_yaml(tmp_path):
    path = tmp_path / "ppo_config.yml"
    path.write_text(TRLX_YAML)
    return path


def test_trlx_yaml_loads_unchanged(fake_host, trlx_yaml):
    config = TRLConfig.load_yaml(trlx_yaml)
    assert isinstance(config.method, FakeMethodConfig)
    assert config.method.gamma == 0.99 and config.method.gen_kwargs["max_new_tokens"] == 40
    assert config.optimizer.kwargs["betas"] == [0.9, 0.95]
    assert config.model.num_layers_unfrozen == 2
    assert config.train.minibatch_size == 8 and config.train.save_best is False
    # trlX's defaults fill what the YAML leaves out
    assert config.train.checkpoint_dir == "ckpts" and config.tokenizer.padding_side == "left"
    assert config.model.model_arch_type == "causal"


def test_to_dict_from_dict_round_trips(fake_host, trlx_yaml):
    config = TRLConfig.load_yaml(trlx_yaml)
    again = TRLConfig.from_dict(config.to_dict())
    assert again == config
    assert TRLConfig.from_dict(yaml.safe_load(config.to_yaml())) == config


def test_evolve_deep_merges(fake_host, trlx_yaml):
    config = TRLConfig.load_yaml(trlx_yaml)
    evolved = config.evolve(train=dict(seq_length=64), method=dict(gen_kwargs=dict(max_new_tokens=8)))
    assert evolved.train.seq_length == 64 and evolved.train.batch_size == 32
    assert evolved.method.gen_kwargs == {"max_new_tokens": 8, "top_k": 0, "top_p": 1.0, "do_sample": True}
    assert config.train.seq_length == 1024  # the original is untouched


def test_update_with_dotted_and_nested_keys(fake_host, trlx_yaml):
    base = TRLConfig.load_yaml(trlx_yaml).to_dict()
    updated = TRLConfig.update(base, {"method.gamma": 0.9, "train": {"batch_size": 4}})
    assert updated.method.gamma == 0.9 and updated.train.batch_size == 4
    assert TRLConfig.from_dict(base).update({"method.gamma": 0.5}).method.gamma == 0.5


def test_misspelled_keys_are_errors_with_a_suggestion(fake_host, trlx_yaml, tmp_path):
    base = TRLConfig.load_yaml(trlx_yaml).to_dict()
    with pytest.raises(ConfigError) as info:
        TRLConfig.update(base, {"method.gamam": 0.9})
    assert info.value.errors == ["method.gamam: unknown key; did you mean gamma?"]
    raw = yaml.safe_load(TRLX_YAML)
    raw["train"]["total_step"] = raw["train"].pop("total_steps")
    path = tmp_path / "typo.yml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "train.total_step: unknown key; did you mean total_steps?" in info.value.errors
    assert "train.total_steps: required key missing" in info.value.errors


def test_all_mistakes_are_reported_together_one_line_each(fake_host, trlx_yaml, tmp_path):
    raw = yaml.safe_load(TRLX_YAML)
    raw["train"]["batch_sise"] = 8  # misspelled key
    raw["model"]["num_layers_unfrozen"] = "two"  # wrong type
    raw["method"]["gamma"] = -1  # out of range
    path = tmp_path / "three.yml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert sorted(info.value.errors) == sorted(
        [
            "train.batch_sise: unknown key; did you mean batch_size?",
            "model.num_layers_unfrozen: expected an integer, got 'two'",
            "method.gamma: must be > 0, got -1.0",
        ]
    )
    assert str(info.value).count("\n") == 2


@pytest.mark.parametrize(
    "override, expected",
    [
        ({"train.batch_size": "abc"}, "train.batch_size: expected an integer, got 'abc'"),
        ({"train.batch_size": 0}, "train.batch_size: must be > 0, got 0"),
        ({"train.batch_size": 2.5}, "train.batch_size: expected an integer, got 2.5"),
        ({"train.save_best": "yes"}, "train.save_best: expected true or false, got 'yes'"),
        ({"model.model_arch_type": "encoder"}, "model.model_arch_type: must be one of 'causal', 'seq2seq', got 'encoder'"),
        ({"model.num_layers_unfrozen": -2}, "model.num_layers_unfrozen: must be >= -1, got -2"),
        ({"train.tags": ["a", 3]}, "train.tags[1]: expected a string, got 3"),
        ({"train": 5}, "train: expected a mapping of keys to values, got 5"),
        ({"method.name": "nope"}, "method.name: unknown method 'nope'; installed: fake"),
        ({"data.prompts": {"path": "p.json"}}, "data.prompts.path: must be a file ending in .jsonl, .csv, .txt, got 'p.json'"),
        ({"data.prompts": {"path": "p.txt", "pipeline": "x"}}, "data.prompts: give exactly one of pipeline, path, items (got pipeline, path)"),
        ({"reward": {"function": "no_colon"}}, "reward.function: must be 'module:function', got 'no_colon'"),
    ],
)
def test_type_and_range_errors_name_the_path_and_value(fake_host, override, expected):
    with pytest.raises(ConfigError) as info:
        TRLConfig.update(config_dict(), override)
    assert info.value.errors == [expected]


def test_shorthands_for_sources_and_components(fake_host):
    config = TRLConfig.update(
        config_dict(), {"data.prompts": "prompts.jsonl", "data.samples": "in_memory", "reward": "pkg.mod:fn", "metric": "length"}
    )
    assert config.data.prompts.path == "prompts.jsonl" and config.data.prompts.pipeline is None
    assert config.data.samples.pipeline == "in_memory"
    assert config.reward.function == "pkg.mod:fn" and config.metric.name == "length"


def test_missing_file_and_invalid_yaml_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("train: [1, 2\nmodel: {")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert len(info.value.errors) == 1 and "invalid YAML: line" in info.value.errors[0]
    listing = tmp_path / "list.yml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping of sections"):
        load_config(listing)


def test_set_overrides_apply_to_the_raw_dict_before_validation(fake_host, trlx_yaml):
    config = load_config(trlx_yaml, ["train.batch_size=8", "method.gen_kwargs.top_k=5", "train.tags=[a, b]"])
    assert config.train.batch_size == 8 and config.method.gen_kwargs["top_k"] == 5
    assert config.train.tags == ["a", "b"]
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(trlx_yaml, ["train.batch_size"])


def test_parse_set_and_unflatten():
    assert parse_set("a.b=1.5") == ("a.b", 1.5)
    assert parse_set("a=hello world") == ("a", "hello world")
    assert unflatten({"a.b.c": 1, "a.d": 2, "e": 3}) == {"a": {"b": {"c": 1}, "d": 2}, "e": 3}
    with pytest.raises(ConfigError, match="as a value and as a section"):
        unflatten({"a": 1, "a.b": 2})


def test_floats_accept_yaml_exponent_strings_and_ints(fake_host):
    config = TRLConfig.update(config_dict(), {"train.max_grad_norm": "1e-1", "method.gamma": 1})
    assert config.train.max_grad_norm == pytest.approx(0.1) and isinstance(config.method.gamma, float)


def test_attrs_evolve_on_a_section_validates():
    train = TrainConfig(total_steps=1, seq_length=8, epochs=1, batch_size=1, checkpoint_interval=1, eval_interval=1)
    with pytest.raises(ValueError, match="batch_size: must be > 0, got -3"):
        attrs.evolve(train, batch_size=-3)


def test_overrides_reach_into_shorthand_sections(fake_host, tmp_path):
    path = tmp_path / "short.yml"
    path.write_text(yaml.safe_dump(config_dict(reward="constant", data={"prompts": "in_memory"})))
    config = load_config(path, ["reward.kwargs.value=2", "data.prompts.kwargs.items=[a, b]"])
    assert config.reward.name == "constant" and config.reward.kwargs == {"value": 2}
    assert config.data.prompts.pipeline == "in_memory" and config.data.prompts.kwargs == {"items": ["a", "b"]}
    assert TRLConfig.update(yaml.safe_load(path.read_text()), {"reward.kwargs.value": 3}).reward.kwargs == {"value": 3}
