"""rlkit-methods' config checks (hook rlkit_check_config): typos inside an inline
model.model_path mapping, gen_kwargs and optimizer/scheduler kwargs are refused by
`rlkit config validate` before a model is loaded; every example passes (issue 16, item 5)."""

from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.cli import main
from rlkit_core.preflight import check_config

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml"
PPO = ROOT / "examples" / "randomwalks" / "ppo_randomwalks.yml"
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yml") if "plugin_template" not in p.parts)


@pytest.fixture(autouse=True)
def after_the_sft_examples(tmp_path, monkeypatch):
    """The examples that start from an SFT example's export, as after that run (a missing
    model folder is an error of its own: tests/core/test_validate_model_path.py)."""
    clone = tmp_path / "clone"  # beside what a test writes to tmp_path
    for name in ("randomwalks_sft", "randomwalks_t5_sft", "nemo_randomwalks_sft"):
        (clone / "ckpts" / name / "hf_model").mkdir(parents=True)
    # and the preference chain's pairs and reward model (examples/preferences/chain.py's stages 1 and 2)
    (clone / "runs" / "prefs" / "rm" / "hf_model").mkdir(parents=True)
    (clone / "runs" / "prefs" / "pairs.jsonl").write_text("")
    (clone / "examples").symlink_to(ROOT / "examples")  # the configs' own relative paths
    monkeypatch.chdir(clone)


def validate(capsys, config, *sets):
    code = main(["config", "validate", str(config), *[arg for s in sets for arg in ("--set", s)]])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "config, sets, expected",
    [
        (SFT, ["model.model_path={model_type: gpt2, n_layr: 2}"],
         "error: model.model_path.n_layr: not a field of GPT2Config (gpt2); did you mean n_layer?"),
        (SFT, ["model.model_path={model_type: gtp2, n_layer: 2}"],
         "error: model.model_path.model_type: 'gtp2' is not a transformers model type; did you mean gpt2?"),
        (PPO, ["method.gen_kwargs.top_kk=5"], "error: method.gen_kwargs.top_kk: not a generation setting; did you mean top_k?"),
        (PPO, ["method.gen_experience_kwargs={max_new_tokens: 4, do_smaple: true}"],
         "error: method.gen_experience_kwargs.do_smaple: not a generation setting; did you mean do_sample?"),
        (SFT, ["optimizer.kwargs.weight_decy=0.1"], "error: optimizer.kwargs.weight_decy: AdamW has no such argument; did you mean weight_decay?"),
        (SFT, ["scheduler.kwargs.eta_mn=0.1"], "error: scheduler.kwargs.eta_mn: CosineAnnealingLR has no such argument; did you mean eta_min?"),
        (PPO, ["train.trainer=AccelerateSFTTrainer"], "error: train.trainer: AccelerateSFTTrainer trains sft, but method.name selects"),
    ],
)
def test_validate_refuses_typos_a_run_would_hit_or_ignore(rlkit_host, capsys, config, sets, expected):
    code, lines = validate(capsys, config, *sets)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(expected), lines


def test_an_inline_model_mapping_with_right_keys_and_aliases_passes(rlkit_host, capsys):
    code, lines = validate(capsys, SFT, "model.model_path={model_type: gpt2, n_layer: 2, hidden_size: 32, num_attention_heads: 2, vocab_size: 64}")
    assert code == 0, lines


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_passes_the_checks(path, rlkit_host):
    config = load_config(path)
    assert check_config(config, rlkit_host.registry, rlkit_host.hook) == []


def test_files_an_earlier_stage_writes_are_checked_before_a_model_loads(rlkit_host, capsys):
    """The reward model loads at the first rollout's scoring: without the check a PPO run on a
    missing one loads the policy and samples before it stops."""
    Path("runs/prefs/pairs.jsonl").unlink()
    Path("runs/prefs/rm/hf_model").rmdir()
    prefs = ROOT / "examples" / "preferences"
    code, lines = validate(capsys, prefs / "dpo_smollm2.yml")
    assert code == 2 and lines == ["error: data.samples.kwargs.path: 'runs/prefs/pairs.jsonl' not found (pipeline "
                                   "preference_pairs); make it first (the step that writes it), or point the path at an "
                                   "existing file"], lines
    code, lines = validate(capsys, prefs / "ppo_rm_smollm2.yml")
    assert code == 2 and lines == ["error: reward.kwargs.path: 'runs/prefs/rm/hf_model' not found (reward reward_model); "
                                   "train the reward model first (its run exports one), or point the path at a "
                                   "sequence-classifier folder"], lines
    # a hub id is not a local path: it may load where the hub is reachable
    code, lines = validate(capsys, prefs / "ppo_rm_smollm2.yml", "reward.kwargs.path=org/reward-model")
    assert code == 0, lines
    code, lines = validate(capsys, SFT, "data.samples={pipeline: logged_completions, kwargs: {path: logs/rows.jsonl}}")
    assert code == 2 and lines[0].startswith("error: data.samples.kwargs.path: 'logs/rows.jsonl' not found "
                                             "(pipeline logged_completions)"), lines


def test_train_from_python_refuses_a_typo_in_an_inline_model_mapping_before_loading(rlkit_host, tmp_path):
    """The Python API runs the same checks: a misspelled field trained another model (n_layr ignored)."""
    from rlkit_core import train
    from rlkit_core.errors import ConfigError

    config = load_config(SFT, {"model.model_path": {"model_type": "gpt2", "n_layr": 1, "vocab_size": 23},
                               "train.checkpoint_dir": str(tmp_path / "ckpts")})
    with pytest.raises(ConfigError) as error:
        train(samples=["ab"] * 8, config=config)
    assert error.value.errors == ["model.model_path.n_layr: not a field of GPT2Config (gpt2); did you mean n_layer?"]
    assert not (tmp_path / "ckpts").exists()  # refused before the trainer claimed a folder or built a model
