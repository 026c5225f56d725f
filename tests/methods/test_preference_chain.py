"""The SmolLM2/IMDB preference chain (examples/preferences): its YAMLs validate and hand each
other the right paths, its evaluations use the main job's eval prompts, and pairs.py's pair
making (sampling, ties, the held-out split, the rows it writes) is right, on a tiny model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "examples" / "preferences"
YAMLS = ["rm_smollm2.yml", "ppo_rm_smollm2.yml", "dpo_smollm2.yml"]


def load_script(name: str):
    sys.path.insert(0, str(CHAIN))
    try:
        spec = importlib.util.spec_from_file_location(f"preference_chain_{name}", CHAIN / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(CHAIN))


@pytest.mark.parametrize("name", YAMLS)
def test_the_chain_yamls_validate(name, rlkit_host, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a fresh clone: no stage has run yet
    # the reward model's run needs stage 1's pairs, PPO stage 2's model: validate names what is missing
    needs = {"rm_smollm2.yml": "pairs.jsonl", "dpo_smollm2.yml": "pairs.jsonl", "ppo_rm_smollm2.yml": "rm/hf_model"}[name]
    assert main(["config", "validate", str(CHAIN / name)]) == 2
    assert f"runs/prefs/{needs}' not found" in capsys.readouterr().err
    (tmp_path / "runs" / "prefs" / "rm" / "hf_model").mkdir(parents=True)  # as after the stages before
    (tmp_path / "runs" / "prefs" / "pairs.jsonl").write_text("")
    assert main(["config", "validate", str(CHAIN / name)]) == 0, capsys.readouterr().err


def test_each_stage_reads_what_the_one_before_writes():
    chain = load_script("chain")
    rm, ppo, dpo = (load_config(CHAIN / name) for name in YAMLS)
    pairs = str(chain.OUT / "pairs.jsonl")
    assert rm.data.samples.kwargs["path"] == dpo.data.samples.kwargs["path"] == pairs
    assert ppo.reward.name == "reward_model"
    assert ppo.reward.kwargs["path"] == str(Path(rm.train.checkpoint_dir) / "hf_model")
    commands = chain.stages(overwrite=False)
    assert list(commands) == ["pairs", "reward_model", "rm_accuracy", "ppo", "dpo", "vader"]
    assert str(chain.OUT) in commands["pairs"]
    assert str(Path(rm.train.checkpoint_dir) / "hf_model") in commands["rm_accuracy"]
    vader_models = commands["vader"]
    for config in (ppo, dpo):
        assert str(Path(config.train.checkpoint_dir) / "hf_model") in vader_models
    assert all("--set" not in c for c in commands.values())
    assert "train.overwrite_checkpoint_dir=true" in chain.stages(overwrite=True)["dpo"]


def test_the_true_vader_is_judged_on_the_main_jobs_eval_prompts():
    job = load_config(ROOT / "rlkit_core" / "configs" / "ppo_smollm2.yml")
    for name in ("ppo_rm_smollm2.yml", "dpo_smollm2.yml"):
        config = load_config(CHAIN / name)
        assert config.data.eval_prompts == job.data.eval_prompts
        assert config.metric.name == "sentiment"
        assert config.method.gen_kwargs == job.method.gen_kwargs
    ppo = load_config(CHAIN / "ppo_rm_smollm2.yml")
    assert ppo.data.prompts == job.data.prompts
    pairs = load_script("pairs")
    assert pairs.GEN_KWARGS == job.method.gen_kwargs  # the pairs are sampled as the rollouts are
    assert job.data.eval_prompts.kwargs == {"n": 32, "words": 4, "seed": 1}  # evaluate.py's


@pytest.fixture
def tiny_lm(tokenizer):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_head=2, n_embd=16, n_positions=64,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return GPT2LMHeadModel(config).eval()


def test_continuations_are_the_new_tokens_of_each_prompt_whatever_its_padding(tiny_lm, tokenizer):
    pairs = load_script("pairs")
    prompts = ["the movie", "a terrible film with awful"]  # different lengths: left padding in one batch
    greedy = dict(max_new_tokens=5, do_sample=False)
    together = pairs.sample_continuations(tiny_lm, tokenizer, prompts, per_prompt=2, seed=0, gen_kwargs=greedy)
    assert [len(c) for c in together] == [2, 2]
    for prompt, continuations in zip(prompts, together):
        alone = pairs.sample_continuations(tiny_lm, tokenizer, [prompt], per_prompt=1, seed=0, gen_kwargs=greedy)
        assert continuations == [alone[0][0]] * 2
        assert not continuations[0].startswith(prompt)
    sampled = dict(max_new_tokens=5, do_sample=True, top_k=0, top_p=1.0)
    first = pairs.sample_continuations(tiny_lm, tokenizer, prompts, per_prompt=2, seed=3, gen_kwargs=sampled)
    assert first == pairs.sample_continuations(tiny_lm, tokenizer, prompts, per_prompt=2, seed=3, gen_kwargs=sampled)


def test_the_higher_score_is_chosen_and_ties_and_blanks_are_dropped():
    pairs = load_script("pairs")
    scores = {" good": 0.5, " bad": -0.5, " plain": 0.0, " flat": 0.0, "": 0.0}
    prompts = ["a", "b", "c", "d"]
    continuations = [[" good", " bad"], [" bad", " good"], [" plain", " flat"], ["", " good"]]
    made, counts = pairs.preference_pairs(prompts, continuations, lambda texts: [scores[t] for t in texts])
    assert made == [
        {"prompt": "a", "chosen": " good", "rejected": " bad", "score_chosen": 0.5, "score_rejected": -0.5},
        {"prompt": "b", "chosen": " good", "rejected": " bad", "score_chosen": 0.5, "score_rejected": -0.5},
    ]
    assert counts == {"prompts": 4, "blank": 1, "ties": 1, "narrow": 0, "pairs": 2}


def test_a_prompts_pair_is_its_best_against_its_worst_and_narrow_gaps_are_dropped():
    pairs = load_script("pairs")
    scores = {" fine": 0.2, " great": 0.8, " meh": 0.0, " awful": -0.6, " ok": 0.1, " nice": 0.4, "": 0.0}
    continuations = [[" fine", " great", " meh", " awful"], [" ok", " fine", " meh", " nice"], [" meh", "", " great", " "]]
    made, counts = pairs.preference_pairs(["a", "b", "c"], continuations, lambda texts: [scores[t] for t in texts],
                                          min_gap=0.5)
    assert [(p["prompt"], p["chosen"], p["rejected"]) for p in made] == [("a", " great", " awful"), ("c", " great", " meh")]
    assert counts == {"prompts": 3, "blank": 0, "ties": 0, "narrow": 1, "pairs": 2}  # b: 0.4 - 0.0 < 0.5
    kept, _ = pairs.preference_pairs(["b"], continuations[1:2], lambda texts: [scores[t] for t in texts], min_gap=0.4)
    assert [(p["chosen"], p["rejected"]) for p in kept] == [(" nice", " meh")]  # a gap equal to min_gap is kept


def test_the_held_out_split_is_disjoint_seeded_and_sized(tmp_path):
    pairs = load_script("pairs")
    rows = [{"prompt": f"p{i}", "chosen": " x", "rejected": " y"} for i in range(20)]
    train, held = pairs.split(rows, 0.25, seed=1)
    assert len(held) == 5 and len(train) == 15
    assert sorted(r["prompt"] for r in train + held) == sorted(r["prompt"] for r in rows)
    assert [r for r in rows if r in train] == train  # the original order
    assert (train, held) == pairs.split(rows, 0.25, seed=1)
    assert held != pairs.split(rows, 0.25, seed=2)[1]
    with pytest.raises(ValueError, match="eval_fraction"):
        pairs.split(rows, 1.0, seed=1)


def test_the_written_pairs_are_the_preference_pairs_sources_rows(tmp_path):
    from rlkit_methods.data.preference_rows import preference_pairs as source

    pairs = load_script("pairs")
    made, _ = pairs.preference_pairs(["The film", "A"], [[" was great.", " was bad."], [" fine", " awful"]],
                                     lambda texts: [{" was great.": 0.6, " was bad.": -0.5, " fine": 0.2, " awful": -0.5}[t]
                                                    for t in texts])
    pairs.write_jsonl(tmp_path / "pairs.jsonl", made)
    rows = source(str(tmp_path / "pairs.jsonl"))
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in rows] == [("The film", " was great.", " was bad."),
                                                                      ("A", " fine", " awful")]
    assert json.loads((tmp_path / "pairs.jsonl").read_text().splitlines()[0])["score_chosen"] == 0.6


def test_reuse_remakes_the_pairs_from_the_kept_samples_without_a_model(tmp_path, monkeypatch, capsys):
    pairs = load_script("pairs")
    samples = [{"prompt": f"Review {i}:", "continuations": [" a wonderful, great film", " a terrible, awful mess", " it was",
                                                         " fine"]} for i in range(10)]
    samples.append({"prompt": "Flat:", "continuations": [" it was", " a film", " the end", " so"]})
    pairs.write_jsonl(tmp_path / "samples.jsonl", samples)
    monkeypatch.setattr(pairs, "load_model", lambda *a: pytest.fail("--reuse must not load a model"))
    monkeypatch.setattr(sys, "argv", ["pairs.py", "--out", str(tmp_path), "--reuse", "--min-gap", "0.5", "--eval-fraction", "0.2"])
    pairs.main()
    counts = json.loads((tmp_path / "pairs.json").read_text())
    assert {k: counts[k] for k in ("prompts", "ties", "narrow", "pairs", "train", "eval")} == \
        {"prompts": 11, "ties": 1, "narrow": 0, "pairs": 10, "train": 8, "eval": 2}
    rows = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert {(r["chosen"], r["rejected"]) for r in rows} == {(" a wonderful, great film", " a terrible, awful mess")}
    monkeypatch.setattr(sys, "argv", ["pairs.py", "--out", str(tmp_path / "none"), "--reuse"])
    with pytest.raises(SystemExit):
        pairs.main()
    assert "samples.jsonl does not exist" in capsys.readouterr().err
