"""NeMoPPOTrainer, NeMoILQLTrainer and NeMoSFTTrainer (the shared loop on MegatronEngine) on two
CPU processes, through rlkit_core.train: the engine conformance checks (lifecycle hooks with
their arguments, metric names, evaluation samples as dicts, atomic checkpoints with
config.yml, exact resume) at TP=2, DP=2 and PP=2 (ILQL and SFT: PPO's rollouts need PP=1),
and what each layout promises across ranks."""

import json

import pytest

LAYOUT_METHODS = {"tp2": ("ppo", "ilql", "sft"), "dp2": ("ppo", "ilql", "sft"), "pp2": ("ilql", "sft")}


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
    for method in ("ilql", "sft"):
        a, b = facts(ranks, method)
        assert {a["pp_rank"], b["pp_rank"]} == {0, 1}
        assert a["losses"] == b["losses"] and len(a["losses"]) == 2  # the last stage's stats reach the first
    for r in ranks:
        message = r["ppo/refused"]
        assert message.startswith("ConfigError: megatron_cfg.model.pipeline_model_parallel_size: PPO's rollouts") and "\n" not in message
    by_stage = {f["pp_rank"]: f for f in facts(ranks, "ilql")}
    assert by_stage[1]["target_q_sync"] is True and by_stage[0]["target_q_sync"] is False  # heads on the last stage
