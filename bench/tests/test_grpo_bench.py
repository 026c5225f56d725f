"""The grpo and rloo cases: the same step on both sides, the TRL 1.16 peer's environment, and
rlkit's sides end to end on a tiny model. No timing is asserted (timings are the bench's output)."""

import json
import subprocess

import pytest

import grpo_common
import run
from cases import CASES
from peer import PeerError, ensure_grpo_peer


def _spec(**grpo):
    args = run.parse_args(["--cases", "grpo"])
    prompts = json.loads(run.PROMPTS.read_text())["prompts"]
    return {"device": "cpu", "dtype": "float32", "seed": 0, "model": "/models/smollm2",
            "grpo": {**run.grpo_spec(args, prompts), **grpo}}


def test_grpo_and_rloo_cases_put_trl_1_16_against_both_rlkit_settings():
    for method, trl_class in (("grpo", "GRPOTrainer"), ("rloo", "RLOOTrainer")):
        case = CASES[method]
        assert (case.metric, case.higher_is_better, case.reference.env) == ("step_s", False, "trl-grpo")
        assert case.reference.name == f"TRL 1.16.0 {trl_class}" and case.reference.script == "grpo_trl.py"
        assert [(s.script, s.variant) for s in case.sides if not s.reference] == \
            [("grpo_rlkit.py", f"{method}-k2"), ("grpo_rlkit.py", f"{method}-all")]
    no_peer = run.parse_args(["--cases", "grpo,rloo", "--no-peer"]).case_list
    assert [[s.env for s in c.sides] for c in no_peer] == [["rlkit", "rlkit"], ["rlkit", "rlkit"]]


def test_grpo_spec_comes_from_the_arguments_and_bad_ones_are_one_line(capsys):
    args = run.parse_args(["--cases", "rloo", "--num-generations", "8", "--grpo-prompts", "2", "--new-tokens", "16",
                           "--grpo-beta", "0"])
    spec = run.grpo_spec(args, ["a", "b", "c"])
    assert spec["prompts"] == ["a", "b"] and (spec["num_generations"], spec["new_tokens"], spec["beta"]) == (8, 16, 0.0)
    assert grpo_common.completions_per_step(spec) == 16
    for bad in (["--num-generations", "1"], ["--grpo-prompts", "9"], ["--grpo-beta", "-1"]):
        with pytest.raises(SystemExit):
            run.parse_args(["--cases", "grpo", *bad])
        assert "--num-generations must be >= 2" in capsys.readouterr().err


def test_both_sides_configure_the_same_step(tmp_path):
    from grpo_rlkit import grpo_config
    from grpo_trl import trl_config

    spec = _spec()
    rows = grpo_common.completions_per_step(spec["grpo"])
    for method in ("grpo", "rloo"):
        theirs = trl_config(spec, method, dict, str(tmp_path))  # TRL's config as the keyword arguments it gets
        ours = grpo_config(spec, method, 2, str(tmp_path))
        m, g = ours.method, ours.method.gen_kwargs
        assert theirs["per_device_train_batch_size"] == ours.train.batch_size == m.num_rollouts == m.chunk_size == rows
        assert theirs["gradient_accumulation_steps"] == theirs["steps_per_generation"] == 1 and ours.train.minibatch_size is None
        assert theirs["max_steps"] == ours.train.total_steps == 1
        assert theirs["num_generations"] == m.num_generations and theirs["num_iterations"] == m.num_iterations == 1
        assert theirs["max_completion_length"] == theirs["generation_kwargs"]["min_new_tokens"] == g["max_new_tokens"] == g["min_new_tokens"]
        assert (theirs["temperature"], theirs["top_p"], theirs["top_k"]) == (g["temperature"], g["top_p"], g["top_k"])
        assert (theirs["beta"], theirs["epsilon"], theirs["epsilon_high"]) == (m.beta, m.epsilon, m.epsilon_high)
        assert theirs["beta"] > 0  # the step includes the reference on both sides
        assert theirs["learning_rate"] == ours.optimizer.kwargs["lr"] and theirs["max_grad_norm"] == ours.train.max_grad_norm
        assert [theirs["adam_beta1"], theirs["adam_beta2"]] == ours.optimizer.kwargs["betas"]
        assert theirs["bf16"] is False and theirs["gradient_checkpointing"] is False and theirs["use_cpu"] is True
        if method == "grpo":
            assert (theirs["loss_type"], theirs["scale_rewards"]) == (m.loss_type, m.scale_rewards) == ("dapo", "group")
        else:
            assert "loss_type" not in theirs and type(m).__name__ == "RLOOConfig"
    assert grpo_config(spec, "grpo", -1, str(tmp_path)).model.num_layers_unfrozen == -1


def test_variants_and_the_shared_reward():
    assert grpo_common.split_variant("rloo-all", {"k2": 2, "all": -1}) == ("rloo", -1)
    with pytest.raises(SystemExit, match="--variant must be one of grpo-k2, grpo-all, rloo-k2, rloo-all, got 'ppo-k2'"):
        grpo_common.split_variant("ppo-k2", {"k2": 2, "all": -1})
    assert grpo_common.distinct_words(["a b a", "", "x y z w"], 4) == [0.5, 0.0, 1.0]


def test_grpo_peer_is_trl_1_16_with_torch_and_transformers_on_one_pip_line(monkeypatch, tmp_path):
    import peer

    monkeypatch.setattr(peer, "versions", lambda python: {"trl": "0.29.1", "torch": "2.13.0+cpu", "transformers": "5.23.0"})
    with pytest.raises(PeerError, match="--grpo-peer-python python3: has trl 0.29.1, the bench compares with trl 1.16.0"):
        ensure_grpo_peer("python3")
    calls = []

    class Builder:
        def __init__(self, **kwargs):
            pass

        def create(self, folder):
            (folder / "bin").mkdir(parents=True)
            (folder / "bin" / "python").write_text("")

    monkeypatch.setattr(peer, "GRPO_PEER_VENV", tmp_path / "venv")
    monkeypatch.setattr(peer.venv, "EnvBuilder", Builder)
    monkeypatch.setattr(peer.subprocess, "run", lambda argv, check: calls.append(argv) or subprocess.CompletedProcess(argv, 0))
    monkeypatch.setattr(peer, "versions", lambda python: {"trl": "1.16.0", "torch": "2.13.0+cpu", "transformers": "5.23.0"})
    python, found = ensure_grpo_peer(None)
    assert python == str(tmp_path / "venv" / "bin" / "python") and found["trl"] == "1.16.0"
    assert calls == [[python, "-m", "pip", "install", "-q", "torch==2.13.0", "trl==1.16.0", "transformers==5.23.0"]]
    ensure_grpo_peer(None)  # made once
    assert len(calls) == 1


def test_the_loss_script_finds_rlkits_losses_with_the_api_it_compares():
    import grpo_losses_vs_trl as script

    losses = script.rlkit_losses()  # by file: the peer's venv has torch but no rlkit
    for name in ("group_advantages", "rloo_advantages", "rloo_kl_rewards", "grpo_loss", "rloo_loss"):
        assert callable(getattr(losses, name)), name
    import torch

    batch = script.random_batch(torch.Generator().manual_seed(0))
    assert batch["mask"].shape == batch["logps"].shape == (script.B, script.T) and batch["mask"][0].all()
    assert (batch["mask"].sum(1) >= 1).all() and not batch["mask"].all()  # padded rows, none empty


@pytest.mark.slow  # four worker processes, each building a trainer
def test_rlkit_grpo_and_rloo_sides_run_one_step_and_report_their_phases(tiny_model, tmp_path):
    out = tmp_path / "bench.json"
    code = run.main(["--cases", "grpo,rloo", "--no-peer", "--repeats", "1", "--model", str(tiny_model),
                     "--grpo-prompts", "2", "--num-generations", "2", "--new-tokens", "4",
                     "--json", str(out), "--results-dir", str(tmp_path / "runs")])
    report = json.loads(out.read_text())
    errors = {side: r["error"] for case in report["cases"].values() for side, runs in case["runs"].items() for r in runs if r["error"]}
    assert code == 0 and not errors, errors
    for method in ("grpo", "rloo"):
        results = {side: runs[0]["result"] for side, runs in report["cases"][method]["runs"].items()}
        for result in results.values():
            assert result["optimizer_steps"] == 1 and result["completions"] == 4
            assert result["trainer"] == f"Accelerate{method.upper()}Trainer"
            assert {"rollout/generate", "rollout/reward", "train/backward", "train/optimizer"} <= set(result["phases"])
            assert result["step_s"] == pytest.approx(sum(result["phases"].values()))
            assert result["trainer_metrics"]["completions/mean_length"] == 4  # exactly new_tokens
            assert result["peak_rss_after"]["train"] >= result["peak_rss_after"]["load"] > 0
        k2, all_layers = results[f"rlkit {method.upper()} unfrozen=2"], results[f"rlkit {method.upper()} unfrozen=-1"]
        assert k2["trainable_params"] < all_layers["trainable_params"]
        assert "rollout/reference" in k2["phases"]  # beta > 0: the hydra reference ran in the rollout


def test_grpo_vllm_case_samples_with_vllm_on_both_sides_of_the_same_step(tmp_path):
    from grpo_rlkit import VLLM, grpo_config
    from grpo_trl import trl_config

    case = CASES["grpo-vllm"]
    assert case.reference.env == "trl-vllm" and case.metric == "step_s"
    sides = {s.variant: s for s in case.sides}
    assert {v for v, s in sides.items() if s.env == "trl-vllm"} == {"grpo-trl", "grpo-trlvllm"}
    assert {v for v, s in sides.items() if s.env == "rlkit"} == {"grpo-k2", "grpo-all", "grpo-k2vllm", "grpo-allvllm"}
    assert VLLM == {"k2vllm": 2, "allvllm": -1}

    spec = _spec()
    plain, theirs = trl_config(spec, "grpo", dict, str(tmp_path)), trl_config(spec, "grpo", dict, str(tmp_path), True)
    assert "use_vllm" not in plain
    assert (theirs["use_vllm"], theirs["vllm_mode"]) == (True, "colocate")
    # vLLM's SamplingParams: exactly new_tokens tokens, as on rlkit's side
    assert theirs["generation_kwargs"] == {"min_tokens": spec["grpo"]["new_tokens"]}
    assert {k: v for k, v in theirs.items() if not k.startswith(("vllm_", "use_vllm", "generation_kwargs"))} == \
        {k: v for k, v in plain.items() if k != "generation_kwargs"}
    ours = grpo_config(spec, "grpo", 2, str(tmp_path), "vllm")
    assert ours.train.generator == "vllm" and grpo_config(spec, "grpo", 2, str(tmp_path)).train.generator is None
    assert run.parse_args(["--cases", "grpo-vllm", "--no-peer"]).case_list[0].sides == tuple(
        s for s in case.sides if s.env == "rlkit")


def test_skip_side_leaves_out_the_sides_it_names():
    cases = run.parse_args(["--cases", "grpo-vllm", "--skip-side", "use_vllm", "--skip-side", "unfrozen=-1"]).case_list
    assert [s.variant for s in cases[0].sides] == ["grpo-trl", "grpo-k2", "grpo-k2vllm"]
