"""The reward and dpo cases and the loss check against TRL 1.16: the same pairs, settings and
weights on both sides, and how the comparison reads. No timing is asserted."""

import json
import subprocess
import sys

import pytest

import prefs_common
import prefs_losses_vs_trl
import prefs_rlkit
import run
from cases import CASES

REVIEWS = [(" ".join(f"{kind}{i}w{j}" for j in range(50)), label) for i in range(6) for kind, label in (("good", 1), ("bad", 0))]


def _spec(**prefs):
    pairs = prefs_common.make_pairs(REVIEWS, 4, seed=0)
    base = {"pairs": pairs, "check_pairs": pairs[:2], "batch_pairs": 2, "steps": 2, "lr": 1e-6, "beta": 0.1,
            "loss_type": "sigmoid", "max_length": 1024}
    return {"device": "cpu", "dtype": "float32", "seed": 0, "model": "/models/smollm2", "prefs": {**base, **prefs}}


def test_reward_and_dpo_cases_put_trl_1_16_against_rlkits_options():
    for method, trl_class in (("reward", "RewardTrainer"), ("dpo", "DPOTrainer")):
        case = CASES[method]
        assert (case.metric, case.higher_is_better, case.reference.env) == ("step_s", False, "trl-grpo")
        assert case.reference.name == f"TRL 1.16.0 {trl_class}" and case.reference.script == "prefs_trl.py"
        packed = [("prefs_rlkit.py", "reward-all-packed")] if method == "reward" else []
        assert [(s.script, s.variant) for s in case.sides if not s.reference] == \
            [("prefs_rlkit.py", f"{method}-all"), ("prefs_rlkit.py", f"{method}-k2"), *packed]
    no_peer = run.parse_args(["--cases", "reward,dpo", "--no-peer"]).case_list
    assert [[s.env for s in c.sides] for c in no_peer] == [["rlkit"] * 3, ["rlkit"] * 2]
    with pytest.raises(SystemExit):
        run.parse_args(["--cases", "dpo", "--pref-steps", "1"])  # no step after the warm-up


def test_pairs_prefer_a_positive_reviews_continuation_and_are_reproducible():
    pairs = prefs_common.make_pairs(REVIEWS, 4, seed=3)
    assert pairs == prefs_common.make_pairs(REVIEWS, 4, seed=3) and pairs != prefs_common.make_pairs(REVIEWS, 4, seed=4)
    for pair in pairs:
        prompt = pair["prompt"].split()
        assert len(prompt) == 8 and all(w.startswith("good") for w in prompt)
        chosen, rejected = pair["chosen"].split(), pair["rejected"].split()
        assert chosen[0] == prompt[0].replace("w0", "w8") and all(w.startswith("bad") for w in rejected)
        assert pair["chosen"].startswith(" ") and pair["rejected"].startswith(" ")  # a token boundary after the prompt
        assert 6 <= len(chosen) <= 30 and 6 <= len(rejected) <= 30 and 0 <= pair["margin"] < 1
    with pytest.raises(ValueError, match="n: 7 pairs asked for, the reviews give 6"):
        prefs_common.make_pairs(REVIEWS, 7)


def test_both_sides_configure_the_same_step(tmp_path):
    from prefs_rlkit import prefs_config
    from prefs_trl import trl_fields

    spec = _spec()
    for method in ("reward", "dpo"):
        theirs = trl_fields(spec, method, str(tmp_path))
        for unfrozen in (-1, 2):
            ours = prefs_config(spec, method, unfrozen, str(tmp_path))
            assert theirs["per_device_train_batch_size"] == ours.train.batch_size == 2 and ours.train.minibatch_size is None
            assert theirs["gradient_accumulation_steps"] == 1 and theirs["max_steps"] == ours.train.total_steps == 2
            assert theirs["max_length"] == ours.train.seq_length and theirs["max_grad_norm"] == ours.train.max_grad_norm
            assert theirs["learning_rate"] == ours.optimizer.kwargs["lr"]
            assert [theirs["adam_beta1"], theirs["adam_beta2"]] == ours.optimizer.kwargs["betas"]
            assert theirs["weight_decay"] == ours.optimizer.kwargs["weight_decay"] == 0.0
            assert theirs["bf16"] is False and theirs["gradient_checkpointing"] is False and theirs["use_cpu"] is True
            assert ours.model.num_layers_unfrozen == unfrozen and ours.train.packing is False
            if method == "dpo":
                m = ours.method
                assert (theirs["beta"], theirs["loss_type"]) == (m.beta, m.loss_type) == (0.1, "sigmoid")
                assert m.precompute_ref_log_probs is (unfrozen == -1)  # -1: no reference model at all; 2: hydra
            else:
                assert ours.method.eval_fraction == 0.0 and "beta" not in theirs  # every pair trains, as TRL's
    packed = prefs_config(spec, "reward", -1, str(tmp_path), packing=True)
    assert packed.train.packing is True and packed.model.num_layers_unfrozen == -1
    assert prefs_common.split_variant("reward-all-packed", prefs_rlkit.VARIANTS) == ("reward", (-1, True))


def test_reward_pairs_reach_trl_as_rlkits_token_ids():
    from prefs_trl import reward_rows

    class Tokenizer:  # words -> ids, as a tokenizer without special tokens would
        def __call__(self, text, add_special_tokens=True):
            assert add_special_tokens is False
            return type("Out", (), {"input_ids": [len(w) for w in text.split()]})()

    pairs = [{"prompt": "ab c", "chosen": " dddd", "rejected": " ee f", "margin": 0.5}]
    assert reward_rows(pairs, Tokenizer(), margin=True) == {"chosen_ids": [[2, 1, 4]], "rejected_ids": [[2, 1, 2, 1]],
                                                            "margin": [0.5]}
    assert "margin" not in reward_rows(pairs, Tokenizer(), margin=False)


def test_cdpo_is_rlkits_smoothed_sigmoid_and_the_recorder_passes_through():
    import torch

    from prefs_trl import RecordLogSigmoid
    from rlkit_methods.preferences.losses import dpo_loss

    h = torch.tensor([-1.5, 0.2, 3.0], dtype=torch.float64)
    zero = torch.zeros_like(h)
    losses, _, _ = dpo_loss(h, zero, zero, zero, beta=0.5, loss_type="sigmoid", label_smoothing=0.2)
    assert prefs_common.cdpo_loss(h.tolist(), 0.5, 0.2) == pytest.approx(losses.mean().item(), abs=1e-12)
    plain, _, _ = dpo_loss(h, zero, zero, zero, beta=0.5, loss_type="sigmoid")
    assert prefs_common.cdpo_loss(h.tolist(), 0.5, 0.0) == pytest.approx(plain.mean().item(), abs=1e-12)
    recorder = RecordLogSigmoid(torch.nn.functional)
    assert torch.equal(recorder.logsigmoid(h), torch.nn.functional.logsigmoid(h)) and recorder.relu is torch.nn.functional.relu
    assert len(recorder.args) == 1 and torch.equal(recorder.args[0], h)


def test_policy_perturbation_touches_only_the_top_blocks_the_same_way_each_time():
    import torch

    def layers():
        torch.manual_seed(0)
        return torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))

    a, b, initial = layers(), layers(), layers()
    prefs_common.perturb_top(a)
    prefs_common.perturb_top(b)
    for i in range(4):
        same = all(torch.equal(p, q) for p, q in zip(a[i].parameters(), initial[i].parameters()))
        assert same is (i < 2)  # the top two of four blocks moved
        assert all(torch.equal(p, q) for p, q in zip(a[i].parameters(), b[i].parameters()))
    assert prefs_common.score_weight(8).shape == (1, 8) and torch.equal(prefs_common.score_weight(8), prefs_common.score_weight(8))


def test_step_time_is_the_median_after_the_warm_up_and_variants_are_checked():
    assert prefs_common.step_median([9.0, 1.0, 3.0, 2.0]) == 2.0
    assert prefs_common.step_median([4.0]) == 4.0
    with pytest.raises(ValueError, match="no optimizer step was timed"):
        prefs_common.step_median([])
    assert prefs_common.split_variant("dpo-k2", {"all": -1, "k2": 2}) == ("dpo", 2)
    with pytest.raises(SystemExit, match="--variant must be one of reward-trl, dpo-trl, got 'ppo-trl'"):
        prefs_common.split_variant("ppo-trl", {"trl": None})


def _results(loss_shift=0.0, tokens_shift=0):
    names = [name for name, _, _ in prefs_common.LOSS_SETTINGS]
    trl = {"tokens": {"dpo": [[[1, 2], [3, 2], [4, 2]]], "reward": [[[1, 3], [1, 4]]]},
           "losses": {name: {"loss": 0.5 + i} for i, name in enumerate(names)}}
    rlkit = {"tokens": {"dpo": [[[1, 2], [3 + tokens_shift, 2], [4, 2]]], "reward": [[[1, 3], [1, 4]]]}, "losses": {}}
    for i, (name, method, _) in enumerate(prefs_common.LOSS_SETTINGS):
        for option in (("precomputed", "hydra") if method == "dpo" else ("",)):
            rlkit["losses"][f"{name} [{option}]" if option else name] = {"loss": 0.5 + i + loss_shift, "setting": name}
    return rlkit, trl


def test_the_loss_check_compares_every_setting_and_names_what_differs():
    rows, problems = prefs_losses_vs_trl.compare(*_results(loss_shift=0.5 * prefs_losses_vs_trl.TOL))
    assert not problems and len(rows) == 3 + 2 * 5 and max(r[3] for r in rows) < prefs_losses_vs_trl.TOL
    rows, problems = prefs_losses_vs_trl.compare(*_results(loss_shift=3e-4, tokens_shift=1))
    assert problems[0] == "dpo: token ids differ in 1 of 1 pairs"
    assert len(problems) == 1 + len(rows) and all("> 0.0001" in p for p in problems[1:])
    rlkit, trl = _results()
    del rlkit["losses"]["dpo hinge beta=0.1 [precomputed]"], rlkit["losses"]["dpo hinge beta=0.1 [hydra]"]
    del trl["losses"]["reward Bradley-Terry"]
    assert prefs_losses_vs_trl.compare(rlkit, trl)[1] == ["reward Bradley-Terry: no TRL loss", "dpo hinge beta=0.1: no rlkit loss"]


@pytest.mark.slow  # builds the rlkit trainers of the loss check on a tiny model
def test_rlkit_losses_are_the_same_with_either_reference_and_move_with_the_settings(tiny_model, tmp_path):
    spec = _spec()
    spec["model"] = str(tiny_model)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "rlkit.json"
    done = subprocess.run([sys.executable, str(run.BENCH / "prefs_rlkit.py"), "--spec", str(tmp_path / "spec.json"),
                           "--out", str(out), "--variant", "losses"], capture_output=True, text=True, cwd=run.BENCH.parent,
                          env=run.child_env(run.parse_args(["--cases", "dpo"])))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    losses = json.loads(out.read_text())["losses"]
    for name, method, _ in prefs_common.LOSS_SETTINGS:
        if method == "dpo":  # the perturbed policy against the loaded weights, either way
            assert losses[f"{name} [precomputed reference]"]["loss"] == pytest.approx(losses[f"{name} [hydra reference]"]["loss"], abs=1e-6)
    sigmoid = losses["dpo sigmoid beta=0.1 [hydra reference]"]["loss"]
    assert abs(sigmoid - 0.6931472) > 1e-4  # the policy differs from the reference: not log 2
    rewards = [losses[name]["loss"] for name, method, _ in prefs_common.LOSS_SETTINGS if method == "reward"]
    assert len(set(rewards)) == 3  # the margin and the centring term each change the loss


@pytest.mark.slow  # four worker processes, each building a trainer
def test_rlkit_reward_and_dpo_sides_run_their_steps(tiny_model, tmp_path):
    out = tmp_path / "bench.json"
    code = run.main(["--cases", "reward,dpo", "--no-peer", "--repeats", "1", "--model", str(tiny_model), "--pref-pairs", "2",
                     "--pref-steps", "3", "--json", str(out), "--results-dir", str(tmp_path / "runs")])
    report = json.loads(out.read_text())
    errors = {side: r["error"] for case in report["cases"].values() for side, runs in case["runs"].items() for r in runs if r["error"]}
    assert code == 0 and not errors, errors
    for method in ("reward", "dpo"):
        results = {side: runs[0]["result"] for side, runs in report["cases"][method]["runs"].items()}
        for result in results.values():
            assert result["optimizer_steps"] == 3 and len(result["losses"]) == 3 and len(result["steps_s"]) == 3
            assert result["step_s"] == prefs_common.step_median(result["steps_s"])
        every, top = results[f"rlkit {'reward model' if method == 'reward' else 'DPO'} unfrozen=-1" + ("" if method == "reward" else " precomputed ref")], \
            results[f"rlkit {'reward model' if method == 'reward' else 'DPO'} unfrozen=2" + ("" if method == "reward" else " hydra ref")]
        assert top["trainable_params"] < every["trainable_params"]
        if method == "dpo":
            assert (every["reference"], top["reference"]) == ("precomputed log-probs", "engine (hydra)")
            assert every["ref_precompute_s"] > 0 and top["ref_precompute_s"] < every["ref_precompute_s"]
