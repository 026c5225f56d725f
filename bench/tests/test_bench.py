"""The bench's own logic: statistics, run order, per-process memory, phase accounting and
the tables. No test here times anything real (timings are the bench's output, not a test)."""

import importlib.util
import json
import sys

import pytest

import harness
import report
import run
from cases import CASES, Case, Side, select
from peer import PeerError, ensure_peer
from stats import interleaved, speedup, summarize


def test_summary_median_spread_and_quartiles():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median, s.low, s.high, s.q1, s.q3, s.n) == (3.0, 1.0, 5.0, 2.0, 4.0, 5)
    assert s.spread(1) == "1.0-5.0 (IQR 2.0-4.0)"
    assert summarize([2.0, 4.0]).median == 3.0
    with pytest.raises(ValueError, match="no measurements"):
        summarize([])


def test_speedup_reads_times_and_throughputs_the_right_way_round():
    assert speedup(10.0, 30.0, higher_is_better=False) == 3.0  # rlkit 10 s, peer 30 s
    assert speedup(300.0, 100.0, higher_is_better=True) == 3.0  # rlkit 300 tok/s, peer 100
    assert speedup(2.0, 1.0, higher_is_better=False) == 0.5
    with pytest.raises(ValueError):
        speedup(0.0, 1.0, higher_is_better=False)


def test_sides_are_interleaved_per_repetition():
    assert interleaved(["A", "B", "C"], 2) == [(0, "A"), (0, "B"), (0, "C"), (1, "A"), (1, "B"), (1, "C")]
    with pytest.raises(ValueError, match="repeats"):
        interleaved(["A"], 0)


def test_case_selection_keeps_order_and_names_the_choices():
    assert [c.name for c in select("startup, ppo")] == ["startup", "ppo"]
    with pytest.raises(ValueError, match="unknown case pp0; choose from ppo,generate,ilql,sft,walks-ppo,startup"):
        select("ppo,pp0")
    for case in CASES.values():  # every case compares against at most one peer
        assert sum(s.reference for s in case.sides) <= 1


def test_bad_arguments_fail_with_one_line(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--cases", "dpp"])
    assert "unknown case dpp" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.parse_args(["--repeats", "0"])
    assert run.parse_args(["--device", "cuda"]).dtype == "bfloat16"
    assert run.parse_args([]).dtype == "float32"
    no_peer = run.parse_args(["--cases", "ppo,startup", "--no-peer"]).case_list
    assert [s.name for s in no_peer[0].sides] == ["rlkit unfrozen=2", "rlkit unfrozen=-1"]
    assert len(no_peer[1].sides) == 3  # start-up's reference runs in rlkit's interpreter


def test_peak_memory_is_per_process(tmp_path):
    big = run.measure([sys.executable, "-c", "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"], {}, 60, tmp_path / "a.log")
    assert big["returncode"] == 0 and big["peak_rss_bytes"] > 300 * 2**20
    # the worker's own figure starts at its exec, whatever the RSS of the process that spawned it
    ballast = bytearray(200 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    out = tmp_path / "small.json"
    code = f"import sys; sys.path.insert(0, {str(run.BENCH)!r}); import harness; harness.write_result({str(out)!r}, {{}})"
    small = run.measure([sys.executable, "-c", code], {}, 60, tmp_path / "b.log")
    assert small["returncode"] == 0
    assert json.loads(out.read_text())["peak_rss_bytes"] < 100 * 2**20
    del ballast


def test_a_failing_or_hanging_process_is_reported(tmp_path):
    failed = run.measure([sys.executable, "-c", "raise SystemExit(3)"], {}, 60, tmp_path / "a.log")
    assert failed["returncode"] == 3 and not failed["timed_out"]
    hung = run.measure([sys.executable, "-c", "import time; time.sleep(30)"], {}, 1, tmp_path / "b.log")
    assert hung["timed_out"] and hung["returncode"] != 0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_phase_timer_charges_nested_calls_to_their_own_phase():
    clock = FakeClock()
    timer = harness.PhaseTimer(clock_fn=clock, wall_fn=lambda: 3 * clock())  # wall: 3x slower neighbours

    class Model:
        def inner(self):
            clock.now += 4.0

        def outer(self):
            clock.now += 1.0
            self.inner()
            clock.now += 5.0

    model = Model()
    timer.wrap(model, "inner", "rollout/inner")
    timer.wrap(model, "outer", "rollout/outer")
    with timer.section("other"):
        model.outer()
        model.inner()
        clock.now += 2.0
    assert timer.seconds == {"rollout/inner": 8.0, "rollout/outer": 6.0, "other": 2.0}
    assert timer.calls == {"rollout/inner": 2, "rollout/outer": 1, "other": 1}
    assert sum(timer.seconds.values()) == clock.now  # phases add up to the elapsed time, never more
    assert timer.wall == {"rollout/inner": 24.0, "rollout/outer": 18.0, "other": 6.0}


def test_cpu_runs_are_timed_by_cpu_time_and_gpu_runs_by_wall_time():
    assert harness.clock("cpu") is harness.time.process_time
    assert harness.clock("cuda") is harness.time.perf_counter


def _runs(values, rss, phases=None):
    return [{"error": None, "metric": v, "peak_rss_bytes": m, "result": {"phases": phases} if phases else {}}
            for v, m in zip(values, rss)]


def test_case_summary_compares_every_side_with_the_peer():
    case = Case("x", "t", "step_s", "s", False, (Side("peer", "peer", reference=True), Side("ours", "rlkit"), Side("broken", "rlkit")))
    runs = {"peer": _runs([30.0, 28.0, 29.0], [6e9] * 3), "ours": _runs([10.0, 9.0, 11.0], [2e9, 2.4e9, 2e9]),
            "broken": [{"error": "exit 1"}]}
    sides = report.summarize_case(case, runs)
    assert sides["ours"]["speedup"] == pytest.approx(29.0 / 10.0)
    assert sides["ours"]["memory_ratio"] == pytest.approx(2e9 / 6e9)
    assert sides["broken"] == {"runs": 1, "failed": 1}
    table = report.case_table(case, sides)
    assert "2.90x faster" in table and "0.33x" in table and "failed" in table and "peer (peer)" in table


def test_phase_table_shows_medians_and_their_total():
    case = Case("ppo", "t", "step_s", "s", False, (Side("a", "rlkit"),))
    runs = {"a": _runs([1, 1, 1], [1, 1, 1], {"gen": 1.0, "train": 3.0})}
    runs["a"][1]["result"]["phases"] = {"gen": 2.0, "train": 5.0}
    runs["a"][2]["result"]["phases"] = {"gen": 3.0, "train": 4.0}
    text = report.phase_table(case, runs)
    assert "| gen            | 2.00 |" in text and "| train          | 4.00 |" in text and "| sum of medians | 6.00 |" in text


def test_peer_python_with_another_trl_is_refused(monkeypatch):
    import peer

    monkeypatch.setattr(peer, "versions", lambda python: {"trl": "1.2.0", "torch": "2.11.0", "transformers": "5.17.0"})
    with pytest.raises(PeerError, match="has trl 1.2.0, the bench compares with trl 0.29.1; install trl==0.29.1 there"):
        ensure_peer("python3")
    monkeypatch.setattr(peer, "versions", lambda python: {"trl": "0.29.1", "torch": "2.11.0", "transformers": "5.17.0"})
    assert ensure_peer("python3") == ("python3", {"trl": "0.29.1", "torch": "2.11.0", "transformers": "5.17.0"})


def test_versions_names_an_interpreter_that_cannot_import_torch(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(PeerError, match="cannot import torch/transformers: ModuleNotFoundError"):
        ensure_peer(str(fake))


def test_step_summary_splits_rollout_train_and_load():
    timer = harness.PhaseTimer()
    for phase, seconds in {"load": 9.0, "rollout/generate": 2.0, "rollout/reward": 1.0, "train/backward": 4.0, "other": 0.5}.items():
        timer.charge(phase, seconds)
    summary = timer.step_summary()
    assert (summary["step_s"], summary["rollout_s"], summary["train_s"], summary["load_s"]) == (7.5, 3.0, 4.0, 9.0)
    assert summary["step_wall_s"] == 7.5 and summary["clock"] == "cpu"
    assert "load" not in summary["phases"]


def _spec(**extra):
    spec = {"device": "cpu", "dtype": "float32", "seed": 0, "model": "/models/smollm2", "prompts": ["a"],
            "ppo": {"batch_size": 8, "new_tokens": 32, "ppo_epochs": 4, "seq_length": 64, "lr": 1e-5, "kl_coef": 0.05, "vf_coef": 0.1}}
    return {**spec, **extra}


def test_rlkit_ppo_config_matches_the_case_and_takes_overrides(tmp_path):
    from ppo_rlkit import ppo_config
    from rlkit_core.errors import ConfigError

    config = ppo_config(_spec(), 2, str(tmp_path))
    assert (config.method.ppo_epochs, config.method.num_rollouts, config.train.batch_size, config.train.total_steps) == (4, 8, 8, 4)
    assert config.method.gen_kwargs["min_new_tokens"] == config.method.gen_kwargs["max_new_tokens"] == 32
    assert config.model.num_layers_unfrozen == 2 and "fused" not in config.optimizer.kwargs
    fused = ppo_config(_spec(rlkit_set=["optimizer.kwargs.fused=true"]), -1, str(tmp_path))
    assert fused.optimizer.kwargs["fused"] is True and fused.model.num_layers_unfrozen == -1
    with pytest.raises(ConfigError, match="total_step"):
        ppo_config(_spec(rlkit_set=["train.total_step=3"]), 2, str(tmp_path))


def test_code_state_names_the_commit_and_the_changed_core_files():
    state = run.code_state()
    assert state["commit"] and len(state["commit"]) >= 7
    assert all(path.startswith(("rlkit_core/", "plugins/")) for path in state["uncommitted"]), state


def test_no_peer_drops_the_trlx_sides_too():
    cases = run.parse_args(["--cases", "ilql,sft,walks-ppo", "--no-peer"]).case_list
    assert [[s.env for s in c.sides] for c in cases] == [["rlkit"], ["rlkit"], ["rlkit"]]


def test_trlx_requirements_keep_every_pin_but_the_replaced_ones():
    from trlx_peer import trlx_requirements

    text = "--extra-index-url https://x/cu118\naccelerate==0.22.0\ntorch==2.0.1+cu118\ntriton==2.0.0\n" \
           "transformers==4.32.0\ntorchtyping==0.1.4\ntypeguard==4.1.3\ndeepspeed==0.10.1\ntyping_extensions==4.7.1\n# note\nray==2.6.3\n"
    pins = trlx_requirements(text)
    assert pins[0] == "torch==2.13.0"  # on the same pip line as everything else
    assert {"accelerate==0.22.0", "transformers==4.32.0", "ray==2.6.3", "torchtyping==0.1.5", "typeguard==2.13.3"} <= set(pins)
    assert "typeguard==4.1.3" not in pins  # torchtyping 0.1.5 requires typeguard<3
    assert not any(p.startswith(("triton", "deepspeed", "typing_extensions", "torch==2.0", "--")) for p in pins)


def test_trlx_source_must_be_a_checkout(tmp_path, monkeypatch):
    from trlx_peer import trlx_source

    monkeypatch.delenv("RLKIT_TRLX_SRC", raising=False)
    with pytest.raises(PeerError, match="need a trlX checkout: git clone"):
        trlx_source(None)
    with pytest.raises(PeerError, match="not a trlX checkout"):
        trlx_source(str(tmp_path))
    (tmp_path / "trlx").mkdir()
    (tmp_path / "trlx" / "trlx.py").write_text("")
    (tmp_path / "examples" / "randomwalks").mkdir(parents=True)
    (tmp_path / "examples" / "randomwalks" / "randomwalks.py").write_text("")
    monkeypatch.setenv("RLKIT_TRLX_SRC", str(tmp_path))
    assert trlx_source(None) == tmp_path.resolve()


def test_the_trlx_config_is_the_example_yaml_less_rlkit_only_keys():
    import walks

    raw = walks.apply_overrides(walks.example_config("ilql"), {"train.epochs": 2})
    fields = {"train": {"seq_length", "batch_size", "epochs", "total_steps", "eval_interval", "tracker", "pipeline",
                        "checkpoint_interval", "trainer", "checkpoint_dir"},
              "model": {"model_path", "num_layers_unfrozen"}, "tokenizer": {"tokenizer_path", "truncation_side"},
              "optimizer": {"name", "kwargs"}, "scheduler": {"name", "kwargs"},
              "method": {"name", "tau", "gamma", "cql_scale", "awac_scale", "alpha", "beta", "steps_for_target_q_sync",
                         "two_qs", "gen_kwargs"}}
    out, dropped = walks.trlx_config(raw, fields, "/tmp/tok")
    assert dropped == ["data", "metric", "train.save_best"]
    assert out["train"]["epochs"] == 2 and out["train"]["tracker"] is None and out["train"]["pipeline"] == "PromptPipeline"
    assert out["tokenizer"]["tokenizer_path"] == "/tmp/tok" and out["method"] == raw["method"]
    # trlX's example settings (examples/randomwalks/ilql_randomwalks.py)
    assert out["method"]["gen_kwargs"] == {"max_new_tokens": 9, "top_k": 10, "beta": [0, 1, 100], "temperature": 1.0}
    assert (out["train"]["eval_interval"], out["model"]["model_path"]["vocab_size"]) == (16, 23)
    with pytest.raises(KeyError, match="no section 'trian'"):
        walks.apply_overrides(raw, {"trian.epochs": 1})


def test_post_training_figures_and_the_task_check():
    import walks

    assert len(walks.post_training_prompts(list("bcdefghijklmnopqrstu"))) == 1000
    stats = {"metrics/optimality@beta=1": 0.5, "metrics/lengths@beta=1": 4.0, "reward/mean": 1.0}
    assert walks.optimality_figures(stats) == {"optimality@beta=1": 0.5}
    same = {"walks": "a", "eval_prompts": "b", "token_ids": "c", "vocab_size": 23}
    assert walks.same_task([same, dict(same)]) == []
    assert walks.same_task([same, {**same, "token_ids": "d"}]) == ["token_ids"]


def test_the_eval_clock_times_instance_and_class_calls_and_result_splits_them():
    import walks

    clock = walks.EvalClock()

    class Trainer:
        def evaluate(self):
            return {"x": 1}

    t = Trainer()
    clock.wrap_instance(t)
    assert t.evaluate() == {"x": 1} and clock.calls == 1
    clock.wrap_class(Trainer)
    assert Trainer().evaluate() == {"x": 1} and clock.calls == 2
    clock.wall, clock.cpu = 2.0, 1.0
    res = walks.result(10.0, 6.0, clock, steps=10, batch_size=100, figures={"optimality": 0.5})
    assert (res["train_wall_s"], res["train_cpu_s"], res["eval_share"]) == (8.0, 5.0, 0.2)
    assert res["samples_per_s"] == 200.0 and res["post/optimality"] == 0.5


def test_the_trlx_worker_rebuilds_rlkits_randomwalks_tokenizer(tmp_path):
    from rlkit_methods.data.tokenizers import RANDOMWALKS_EOS, RANDOMWALKS_PAD, randomwalks_tokenizer, randomwalks_vocab
    from rlkit_methods.rewards.randomwalks import random_walks
    from transformers import AutoTokenizer

    import walks_trlx  # noqa: F401  (imports only bench modules at load time)

    folder = walks_trlx.build_tokenizer(randomwalks_vocab(), RANDOMWALKS_EOS, RANDOMWALKS_PAD, str(tmp_path / "tok"))
    theirs, ours = AutoTokenizer.from_pretrained(folder), randomwalks_tokenizer()
    texts = [w + RANDOMWALKS_EOS for w in random_walks(seed=1000).walks[:100]]
    assert theirs(texts, add_special_tokens=False).input_ids == ours(texts, add_special_tokens=False).input_ids
    assert (len(theirs), theirs.eos_token_id, theirs.pad_token_id) == (23, ours.eos_token_id, ours.pad_token_id)


def test_extra_table_shows_the_case_figures():
    case = CASES["ilql"]
    runs = {"trlX 0.7 ILQL": [{"error": None, "metric": 1, "peak_rss_bytes": 1, "result": {"wall_s": 60.0, "post/optimality@beta=1": 0.5}}],
            "rlkit ILQL": [{"error": None, "metric": 1, "peak_rss_bytes": 1, "result": {"wall_s": 30.0}}]}
    text = report.extra_table(case, runs)
    assert "| wall_s " in text and "60.0" in text and "30.0" in text and "0.500" in text and "| -" in text


def test_eval_share_reads_evaluation_time_and_the_last_evaluations_spread(tmp_path):
    import eval_share

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps(r) for r in [
        {"step": 0, "kind": "eval", "time/generate": 0.5, "time/evaluate": 0.75},
        {"step": 1, "kind": "train", "loss": 1.0, "time/forward": 0.2},
        {"step": 16, "kind": "eval", "time/generate": 1.0, "time/evaluate": 1.25}]) + "\n")
    assert eval_share.eval_totals(metrics) == {"evaluations": 2, "evaluate_s": 2.0, "generate_s": 1.5}
    samples = tmp_path / "samples.jsonl"
    rows = [{"prompt": "b", "output": "a", "optimality@beta=1": v} for v in (0.0, 1.0, 1.0, 0.0)]
    samples.write_text(json.dumps({"step": 0, "samples": [{"optimality@beta=1": 5.0}]}) + "\n"
                       + json.dumps({"step": 16, "samples": rows}) + "\n")
    spread = eval_share.last_eval_spread(samples)["optimality@beta=1"]
    assert spread["n"] == 4 and spread["mean"] == 0.5 and spread["se"] == pytest.approx((1 / 3) ** 0.5 / 2)
    assert eval_share.yaml_path("ilql_t5").name == "ilql_t5_randomwalks.yml"
    assert eval_share.yaml_path("ppo_lora").name == "ppo_lora_randomwalks.yml"


def test_the_deepspeed_stand_in_gathers_nothing_without_zero3_and_refuses_the_rest():
    # Loaded by file: the real deepspeed may already sit in sys.modules from earlier tests.
    spec = importlib.util.spec_from_file_location("bench_deepspeed_standin",
                                                  run.BENCH / "standins" / "deepspeed" / "__init__.py")
    deepspeed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deepspeed)

    class Param:
        pass

    with deepspeed.zero.GatheredParameters([Param()], modifier_rank=None):
        pass  # trlX's hydra branch copy on one process
    partitioned = Param()
    partitioned.ds_id = 3
    with pytest.raises(RuntimeError, match="stand-in for deepspeed was called"):
        with deepspeed.zero.GatheredParameters([partitioned]):
            pass
    with pytest.raises(RuntimeError, match="stand-in"):
        deepspeed.comm.get_rank()
