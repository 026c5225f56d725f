"""NeMoPPOTrainer, NeMoILQLTrainer and NeMoSFTTrainer (the shared loop on MegatronEngine) on two
CPU processes, through rlkit_core.train: the engine conformance checks (lifecycle hooks with
their arguments, metric names, evaluation samples as dicts, atomic checkpoints with
config.yml, exact resume) at TP=2, DP=2 and PP=2, and what each layout promises across ranks;
PPO at PP=2 takes the steps PPO takes at PP=1 (one process) from the same seed and data."""

import json

import pytest

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

LAYOUT_METHODS = {"tp2": ("ppo", "ilql", "sft"), "dp2": ("ppo", "ilql", "sft"), "pp2": ("ppo", "ilql", "sft")}


def launch(name, tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp(name)
    torchrun("nemo_trainers_worker.py", str(out), name, timeout=1800)
    return [json.loads((out / f"{name}_{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def tp2(tmp_path_factory, torchrun):
    return launch("tp2", tmp_path_factory, torchrun)


@pytest.fixture(scope="module")
def dp2(tmp_path_factory, torchrun):
    return launch("dp2", tmp_path_factory, torchrun)


@pytest.fixture(scope="module")
def pp2(tmp_path_factory, torchrun):
    return launch("pp2", tmp_path_factory, torchrun)


@pytest.mark.parametrize("name", sorted(LAYOUT_METHODS))
def test_conformance_checks_pass_on_every_rank(name, request):
    ranks = request.getfixturevalue(name)
    for rank, results in enumerate(ranks):
        for method in LAYOUT_METHODS[name]:
            for check in ("lifecycle", "exact_resume"):
                assert results[f"{method}/{check}"] == "ok", (name, rank, method, check, results[f"{method}/{check}"])
            assert isinstance(results[f"{method}/facts"], dict), results[f"{method}/facts"]


def facts(ranks, method):
    return [r[f"{method}/facts"] for r in ranks]


def test_tp2_ranks_are_one_replica(tp2):
    ranks = tp2
    for method in ("ppo", "ilql", "sft"):
        a, b = facts(ranks, method)
        assert {a["tp_rank"], b["tp_rank"]} == {0, 1} and a["num_processes"] == b["num_processes"] == 1
        assert a["losses"] == b["losses"] and len(a["losses"]) == 2  # every TP rank sees the same stats
        assert a["weights"] != b["weights"]  # each holds its own shard
    assert facts(ranks, "ppo")[0]["rollouts"] == facts(ranks, "ppo")[1]["rollouts"]  # sampled once, shared over TP
    assert all(f["export_generates"] == "ok" for m in ("ppo", "sft") for f in facts(ranks, m))


def test_dp2_ranks_sample_differently_and_end_with_identical_weights(dp2):
    ranks = dp2
    for method in ("ppo", "ilql", "sft"):
        a, b = facts(ranks, method)
        assert (a["process_index"], b["process_index"], a["num_processes"]) == (0, 1, 2)
        assert a["batch_sizes"] == [4, 2]  # global batch 8 over 2 data-parallel ranks, micro-batches of 2
        assert a["weights"] == b["weights"]  # gradients averaged over the data-parallel ranks
        assert a["losses"] == b["losses"]  # the stats are the data-parallel mean
    a, b = facts(ranks, "ppo")
    assert a["rollouts"] != b["rollouts"]  # each rank samples with its own seed


def test_pp2_stages_split_the_model_and_agree_on_the_stats(pp2):
    ranks = pp2
    for method in ("ppo", "ilql", "sft"):
        a, b = facts(ranks, method)
        assert {a["pp_rank"], b["pp_rank"]} == {0, 1}
        assert a["losses"] == b["losses"] and len(a["losses"]) == 2  # the last stage's stats reach the first
    by_stage = {f["pp_rank"]: f for f in facts(ranks, "ilql")}
    assert by_stage[1]["target_q_sync"] is True and by_stage[0]["target_q_sync"] is False  # heads on the last stage
    by_stage = {f["pp_rank"]: f for f in facts(ranks, "ppo")}
    assert by_stage[1]["has_value_head"] is True and by_stage[0]["has_value_head"] is False
    assert by_stage[0]["rollouts"] == by_stage[1]["rollouts"]  # sampled on the last stage, shared with the first


def test_ppo_at_pp2_takes_the_steps_of_pp1(pp2, tmp_path, megatron_cpu):
    """The same seed and data at PP=1 in this process: the same rollouts (sampling, rewards,
    the reference and value forwards through the pipeline) and the same losses (the loss on
    the last stage, gradients through both stages)."""
    import nemo_walks
    from rlkit_core.testing.fakes import RecordingObserver

    observer = RecordingObserver()
    trainer = nemo_walks.run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=2)), plugins=[observer])
    losses = [kw["metrics"]["losses/total_loss"] for n, kw in observer.calls if n == "rlkit_step_end"]
    rollouts = [e.response_tensor.tolist() for e in trainer.store.history]
    assert trainer.engine.pipeline_size == 1 and len(losses) == 2
    for stage in facts(pp2, "ppo"):
        assert stage["rollouts"] == rollouts
        assert stage["losses"] == pytest.approx(losses, rel=1e-4, abs=1e-6)
