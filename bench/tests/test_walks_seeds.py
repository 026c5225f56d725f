"""The randomwalks cases over seeds: the task seed kept apart from the training seed, and the
per-seed summary (bench/walks_seeds.py)."""

import json
import math

import pytest

import run
import walks
import walks_seeds


def report(seed, trlx, rlkit, case="ilql", **sets):
    """A bench/run.py JSON with one run per side (no trlX side when ``trlx`` is None) and these
    post-training figures."""
    def runs(figures):
        return [{"error": None, "result": {f"post/optimality@beta={b}": v for b, v in figures.items()}}]

    sides = {"trlX 0.7 ILQL": runs(trlx)} if trlx is not None else {}
    return {"spec": {"walks": {"overrides": {case: {"train.seed": seed, **sets}}}},
            "cases": {case: {"runs": {**sides, "rlkit ILQL": runs(rlkit)}}}}


def test_mean_and_standard_error_over_seeds():
    mean, se = walks_seeds.mean_se([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4)
    assert se == pytest.approx(0.2 / math.sqrt(3))  # sample sd 0.2
    assert math.isnan(walks_seeds.mean_se([0.5])[1])


def test_summary_has_a_row_per_seed_the_means_and_the_paired_difference():
    reports = [report(1001, {0: 0.3, 1: 0.5, 100: 0.9}, {0: 0.2, 1: 0.6, 100: 1.0}),
               report(1000, {0: 0.4, 1: 0.4, 100: 0.8}, {0: 0.3, 1: 0.5, 100: 0.95})]
    table = walks_seeds.summarize(reports).splitlines()
    assert table[0] == ("| seed | trlX 0.7 ILQL beta=0 | trlX 0.7 ILQL beta=1 | trlX 0.7 ILQL beta=100 | trlX 0.7 ILQL best"
                        " | rlkit ILQL beta=0 | rlkit ILQL beta=1 | rlkit ILQL beta=100 | rlkit ILQL best |")
    assert table[2].startswith("| 1000 | 0.400 | 0.400 | 0.800 | 0.800 | 0.300 |")  # seeds in order
    assert table[3].startswith("| 1001 |")
    assert table[4].startswith("| mean +- SE (n=2) | 0.350 +- 0.050 | 0.450 +- 0.050 |")
    rows = {line.split(" | ")[0]: line for line in table[6:]}
    assert rows["| beta=0"] == "| beta=0 | -0.100 +- 0.000 | 0 of 2 |"
    assert rows["| best"] == "| best | +0.125 +- 0.025 | 2 of 2 |"  # 0.2 and 0.15 higher


def test_runs_with_another_setting_are_sides_of_their_seed_compared_with_the_first():
    reports = [report(1000, None, {0: 0.3}), report(1001, None, {0: 0.4}),
               report(1000, None, {0: 0.35}, **{"method.steps_for_target_q_sync": 10}),
               report(1001, None, {0: 0.5}, **{"method.steps_for_target_q_sync": 10})]
    table = walks_seeds.summarize(reports).splitlines()
    assert table[0] == "| seed | rlkit ILQL beta=0 | rlkit ILQL best | rlkit ILQL (method.steps_for_target_q_sync=10) beta=0 | "\
                       "rlkit ILQL (method.steps_for_target_q_sync=10) best |"
    assert table[2] == "| 1000 | 0.300 | 0.300 | 0.350 | 0.350 |"
    assert "| paired difference (rlkit ILQL (method.steps_for_target_q_sync=10) - rlkit ILQL) | mean +- SE |"\
           " seeds where it is higher |" in table
    assert "| beta=0 | +0.075 +- 0.025 | 2 of 2 |" in table  # +0.05 and +0.1


def test_the_task_seed_puts_every_randomwalks_part_of_rlkits_config_on_one_graph():
    assert walks.task_seed({}) == walks.TASK_SEED == 1000  # trlX's example graph, whatever train.seed is
    assert walks.task_seed({"task_seed": 7}) == 7
    ilql = walks.rlkit_task_overrides(walks.example_config("ilql"), 7)
    assert ilql == {"data.samples.kwargs.seed": 7, "data.eval_prompts.kwargs.seed": 7, "metric.kwargs.seed": 7}
    ppo = walks.rlkit_task_overrides(walks.example_config("walks-ppo"), 7)
    assert ppo == {"data.prompts.kwargs.seed": 7, "data.eval_prompts.kwargs.seed": 7, "reward.kwargs.seed": 7,
                   "metric.kwargs.seed": 7}
    assert walks.rlkit_task_overrides({"metric": "vader", "data": {"samples": {"path": "x.csv"}}}, 7) == {}


def test_rlkit_trains_evaluates_and_fingerprints_the_task_seeds_graph():
    from rlkit_core import load_config
    from rlkit_methods.rewards.randomwalks import random_walks

    overrides = {"train.seed": 1003, **walks.rlkit_task_overrides(walks.example_config("sft"), 1002)}
    config = load_config(str(walks.EXAMPLES / walks.METHODS["sft"]), overrides)
    assert config.train.seed == 1003
    assert config.data.samples.kwargs == {"with_rewards": False, "seed": 1002}  # the example's own kwargs kept
    assert config.metric.kwargs == {"seed": 1002}
    # train.seed 1003 alone would draw a graph with no path to the goal (every reward 0)
    assert max(random_walks(seed=1003).optimality(w) for w in random_walks(seed=1003).walks) == 0
    assert max(random_walks(seed=1002).optimality(w) for w in random_walks(seed=1002).walks) > 0


def test_the_task_seed_reaches_the_spec():
    spec = run.walks_spec(run.parse_args(["--cases", "ilql", "--walks-set", "train.seed=1001", "--walks-task-seed", "5"]), ["ilql"])
    assert spec["task_seed"] == 5 and spec["overrides"]["ilql"] == {"train.seed": 1001}
    assert run.walks_spec(run.parse_args(["--cases", "ilql"]), ["ilql"])["task_seed"] is None  # -> walks.TASK_SEED


def test_summarize_only_reads_finished_runs(tmp_path, capsys):
    path = tmp_path / "seed-1000.json"
    path.write_text(json.dumps(report(1000, {0: 0.3}, {0: 0.25})))
    assert walks_seeds.main(["--summarize", str(path)]) == 0
    assert "| 1000 | 0.300 | 0.300 | 0.250 | 0.250 |" in capsys.readouterr().out


def test_trlx_state_round_trip_and_the_loss_table():
    import ilql_vs_trlx

    state = ilql_vs_trlx.trlx_state({"transformer.wte.weight": 1}, {"v_head.0.weight": 2})
    assert state == {"base_model.transformer.wte.weight": 1, "ilql_heads.v_head.0.weight": 2}  # trlX's keys
    assert ilql_vs_trlx.split_trlx_state(state) == ({"transformer.wte.weight": 1}, {"v_head.0.weight": 2})
    table = ilql_vs_trlx.compare_steps([{"losses/loss": 1.0, "losses/loss_q": 0.5}, {"losses/loss": 0.9, "losses/loss_q": 0.4}],
                                       [{"losses/loss": 1.0, "losses/loss_q": 0.5}, {"losses/loss": 0.8, "losses/loss_q": 0.4}])
    assert "| 2 | 0.900000 / 0.800000 / 1.0e-01 | 0.400000 / 0.400000 / 0.0e+00 |" in table
    assert table.endswith("largest |difference|: step 1 0.0e+00, all steps 1.0e-01")


def timed_report(seed, side_evals, case="ilql", rlkit_set=(), rlkit_cpu=100.0, **post):
    """A bench/run.py JSON whose sides ran these in-training evaluations: {side: [(step, cpu_s,
    {figure: value}), ...]}; the peer's train() took 100 CPU s, rlkit's ``rlkit_cpu``; both end at ``post``."""
    def runs(evals, cpu):
        return [{"error": None, "result": {"cpu_s": cpu, **{f"post/{k}": v for k, v in post.items()},
                                           "evals": [{"step": s, "cpu_s": c, "figures": f} for s, c, f in evals]}}]

    return {"spec": {"walks": {"overrides": {case: {"train.seed": seed}}}, "rlkit_set": list(rlkit_set)},
            "cases": {case: {"runs": {side: runs(evals, rlkit_cpu if side.startswith("rlkit") else 100.0)
                                      for side, evals in side_evals.items()}}}}


def test_first_reach_is_the_first_evaluation_at_or_above_the_target():
    evals = [{"step": 0, "cpu_s": 1.0, "figures": {"optimality@beta=0": 0.2, "optimality@beta=100": 0.5}},
             {"step": 16, "cpu_s": 9.0, "figures": {"optimality@beta=0": 0.3, "optimality@beta=100": 0.97}},
             {"step": 32, "cpu_s": 17.0, "figures": {"optimality@beta=0": 0.99, "optimality@beta=100": 0.99}}]
    assert walks_seeds.first_reach(evals, "best", 0.964)["step"] == 16  # best: the highest over the betas
    assert walks_seeds.first_reach(evals, "optimality@beta=0", 0.964)["step"] == 32
    assert walks_seeds.first_reach(evals, "best", 0.97)["step"] == 16  # at the target counts
    assert walks_seeds.first_reach(evals, "best", 0.995) is None
    assert walks_seeds.first_reach(evals, "optimality", 0.1) is None  # a figure these runs do not have


def test_time_to_target_averages_the_seeds_that_reach_it_and_divides_by_the_peers_mean():
    reports = [
        timed_report(1000, {"trlX 0.7 ILQL": [(0, 2.0, {"b": 0.1}), (16, 20.0, {"b": 0.9}), (32, 40.0, {"b": 0.97})],
                            "rlkit ILQL": [(0, 1.0, {"b": 0.1}), (8, 10.0, {"b": 0.98})]}, rlkit_set=["train.total_steps=50"], rlkit_cpu=30.0, b=0.96),
        timed_report(1001, {"trlX 0.7 ILQL": [(0, 2.0, {"b": 0.1}), (16, 20.0, {"b": 0.99})],
                            "rlkit ILQL": [(0, 1.0, {"b": 0.1}), (8, 10.0, {"b": 0.5}), (16, 20.0, {"b": 0.97})]},
                     rlkit_set=["train.total_steps=50"], rlkit_cpu=50.0, b=0.98),
        timed_report(1002, {"trlX 0.7 ILQL": [(0, 2.0, {"b": 0.1}), (16, 20.0, {"b": 0.5})],
                            "rlkit ILQL": [(0, 1.0, {"b": 0.1})]}, rlkit_set=["train.total_steps=50"], rlkit_cpu=40.0, b=0.94),
    ]
    rows = walks_seeds.time_to_target(reports, "ilql", "b", 0.964).splitlines()
    assert rows[0].startswith("| side | seeds | reach b >= 0.964 | CPU s to it (mean +- SE) |")
    # trlX: seeds 1000 (40 s, step 32) and 1001 (20 s, step 16) reach it, 1002 does not
    assert rows[2] == "| trlX 0.7 ILQL | 3 | 2 | 30.0 +- 10.0 | 24 | 100.0 +- 0.0 | 0.960 +- 0.012 | 1.00 | 1.00 |"
    # rlkit's side is named with its own settings; 10 and 20 s: 15 / 30 = 0.5 of the peer's;
    # train() 30, 50 and 40 s: 40 / 100
    assert rows[3] == "| rlkit ILQL (train.total_steps=50) | 3 | 2 | 15.0 +- 5.0 | 12 | 40.0 +- 5.8 | 0.960 +- 0.012 | 0.50 | 0.40 |"


def test_a_side_that_never_reaches_the_target_has_no_time_and_no_ratio():
    reports = [timed_report(1000, {"trlX 0.7 SFT": [(0, 1.0, {"optimality": 0.0})], "rlkit SFT": [(0, 1.0, {"optimality": 0.4})]},
                            case="sft", optimality=0.0)]
    rows = walks_seeds.time_to_target(reports, "sft", "optimality", 0.299).splitlines()
    assert rows[2] == "| trlX 0.7 SFT | 1 | 0 | nan +- nan | nan | 100.0 +- nan | 0.000 +- nan | - | 1.00 |"
    assert rows[3].startswith("| rlkit SFT | 1 | 1 | 1.0 +- nan | 0 |") and rows[3].endswith("| - | 1.00 |")


def test_summarize_adds_the_time_to_the_cases_default_target(tmp_path, capsys):
    path = tmp_path / "seed-1000.json"
    path.write_text(json.dumps(timed_report(1000, {"rlkit ILQL": [(0, 1.0, {"optimality@beta=100": 0.97})]},
                                            **{"optimality@beta=100": 0.97})))
    assert walks_seeds.main(["--summarize", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| side | seeds | reach best >= 0.964 |" in out  # ilql's default: trlX's mean final best beta
    assert "| rlkit ILQL | 1 | 1 | 1.0 +- nan | 0 |" in out
    assert walks_seeds.main(["--summarize", str(path), "--target", "0.99", "--target-figure", "optimality@beta=100"]) == 0
    assert "| rlkit ILQL | 1 | 0 |" in capsys.readouterr().out


def test_the_eval_clock_records_each_evaluations_step_cpu_time_and_figures():
    class Trainer:
        iter_count = 0

        def evaluate(self):
            return {"metrics/optimality@beta=1": 0.5, "time/evaluate": 0.1}

    clock = walks.EvalClock()
    trainer = Trainer()
    clock.wrap_instance(trainer)
    trainer.evaluate()  # before start(): timed, not recorded
    clock.start()
    trainer.iter_count = 16
    trainer.evaluate()
    assert clock.calls == 2
    assert [(e["step"], e["figures"]) for e in clock.evals] == [(16, {"optimality@beta=1": 0.5})]
    assert 0 <= clock.evals[0]["cpu_s"] < 5


def test_time_to_target_per_seed_shows_where_each_side_reached_it():
    reports = [timed_report(1001, {"trlX 0.7 ILQL": [(0, 2.0, {"b": 0.1}), (16, 20.0, {"b": 0.99})],
                                   "rlkit ILQL": [(0, 1.0, {"b": 0.1}), (8, 10.5, {"b": 0.98})]}, b=0.97),
               timed_report(1000, {"trlX 0.7 ILQL": [(0, 2.0, {"b": 0.1})], "rlkit ILQL": [(8, 9.0, {"b": 0.97})]}, b=0.9)]
    lines = walks_seeds.time_to_target_per_seed(reports, "ilql", "b", 0.964).splitlines()
    assert lines[:2] == ["side 1: trlX 0.7 ILQL", "side 2: rlkit ILQL"]  # the peer first
    assert lines[5] == "| 1000 | - | 100.0 | 0.900 | 8 / 9.0 | 100.0 | 0.900 |"  # seeds in order; trlX never reached it
    assert lines[6] == "| 1001 | 16 / 20.0 | 100.0 | 0.970 | 8 / 10.5 | 100.0 | 0.970 |"
