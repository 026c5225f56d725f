"""trlX's own YAML configs, and the spellings its configs use, validate unchanged."""

from pathlib import Path

import pytest
import yaml

from rlkit_core import TRLConfig
from rlkit_core.cli import main
from rlkit_core.errors import ConfigError
from rlkit_methods.ilql.config import default_ilql_config
from rlkit_methods.ppo.config import PPOConfig

TRLX = Path(__file__).resolve().parents[1] / "fixtures" / "trlx"
# the YAMLs trlX's scripts and tests load as a TRLConfig (see the README beside them)
TRLX_CONFIGS = [
    TRLX / "configs" / "test_config.yml",
    TRLX / "examples" / "experiments" / "grounded_program_synthesis" / "configs" / "trlx_ppo_config.yml",
]


def validate(capsys, path, *sets):
    args = ["config", "validate", str(path)]
    for item in sets:
        args += ["--set", item]
    code = main(args)
    return code, capsys.readouterr().err


# What rlkit config validate's preflight finds in a trlX YAML that trlX ran without a word:
# the grounded-program-synthesis config asks for 256 new tokens in a 256-token sequence, so
# trlX's PromptPipeline truncated every prompt to max_length 0, i.e. to no tokens at all.
RUN_TIME_DEFECTS = {
    "trlx_ppo_config.yml": ("train.seq_length: 256 leaves no room for prompts after max_new_tokens=256",
                            "train.seq_length=512"),
}


@pytest.mark.parametrize("path", TRLX_CONFIGS, ids=lambda p: str(p.relative_to(TRLX)))
def test_trlx_yaml_loads_unchanged_and_validates_with_the_cli(path, rlkit_host, capsys):
    config = TRLConfig.load_yaml(path)  # every field and spelling as trlX wrote it
    assert config.train.trainer == "AcceleratePPOTrainer"
    code, err = validate(capsys, path)
    defect = RUN_TIME_DEFECTS.get(path.name)
    if defect is not None:
        problem, fix = defect
        assert code == 2 and " ".join(err.split()) .startswith(f"error: {problem}"), err
        code, err = validate(capsys, path, fix)  # that one setting changed, it validates
    assert code == 0, err
    assert "".join(err.split()).startswith("ok:" + str(path))  # the console wraps long lines


def sweep_settings(sweep_file):
    """Every value a trlX sweep may set: each choice, and both ends of a range."""
    sweep = yaml.safe_load(sweep_file.read_text())
    sweep.pop("tune_config")
    for key, spec in sweep.items():
        values = spec["values"] if spec["strategy"] == "choice" else [min(spec["values"]), max(spec["values"])]
        for value in values:
            yield key, value


@pytest.fixture
def ilql_base(tmp_path):
    path = tmp_path / "ilql.yml"
    default_ilql_config().evolve(model=dict(model_path="gpt2"), tokenizer=dict(tokenizer_path="gpt2")).save_yaml(path)
    return path


@pytest.mark.parametrize("sweep, base", [("ppo_sweep.yml", "ppo"), ("ilql_sweep.yml", "ilql")])
def test_every_value_of_trlx_sweeps_validates(sweep, base, ilql_base, rlkit_host, capsys):
    base_path = TRLX_CONFIGS[0] if base == "ppo" else ilql_base
    settings = list(sweep_settings(TRLX / "configs" / "sweeps" / sweep))
    assert len(settings) >= 7
    for key, value in settings:
        code, err = validate(capsys, base_path, f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}")
        assert code == 0, (key, value, err)


def ppo_yaml(tmp_path, scale_reward):
    data = yaml.safe_load((TRLX_CONFIGS[0]).read_text())
    data["method"]["scale_reward"] = scale_reward
    path = tmp_path / "ppo.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "written, read",
    [(False, None), (None, None), ("ignored", "ignored"), ("running", "running"), ("ref", "ref"), ("whiten", "whiten")],
)
def test_scale_reward_spellings_of_trlx(written, read, tmp_path, rlkit_host):
    config = TRLConfig.load_yaml(ppo_yaml(tmp_path, written))
    assert config.method.scale_reward == read
    # the Python spelling trlX's examples use reads the same
    assert PPOConfig(scale_reward=written).scale_reward == read


def test_scale_reward_false_means_no_scaling():
    import torch

    from rlkit_methods.ppo.losses import scale_scores

    scores = torch.tensor([1.0, 3.0])
    assert torch.equal(scale_scores(scores, PPOConfig(scale_reward=False).scale_reward), scores)


@pytest.mark.parametrize(
    "bad, problem",
    [(True, "expected a string, got True"), (1, "expected a string, got 1"), ("runing", "must be one of None, 'ignored'")],
)
def test_scale_reward_other_values_are_one_line_errors(bad, problem, tmp_path, rlkit_host):
    with pytest.raises(ConfigError) as info:
        TRLConfig.load_yaml(ppo_yaml(tmp_path, bad))
    lines = str(info.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"method.scale_reward: {problem}"), lines
