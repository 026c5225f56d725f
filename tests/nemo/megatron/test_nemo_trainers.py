"""NeMo-trainer smoke test: rlkit_core.train selects NeMoPPOTrainer, NeMoILQLTrainer and
NeMoSFTTrainer by train.trainer and runs 2 steps of each at TP=2 on two CPU processes, from a tiny HF GPT-2."""

import json
import math

import pytest


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("trainers")
    torchrun("nemo_trainers_worker.py", str(out))
    return [json.loads((out / f"trainers_{rank}.json").read_text()) for rank in (0, 1)], out


def test_ppo_two_steps_at_tp2(ranks):
    results, out = ranks
    for r in results:
        ppo = r["ppo"]
        assert ppo["steps"] == 2 and ppo["rollouts"] == 4
        assert ppo["ref_vs_policy_at_step0"] == 0.0  # the reference is the initial policy
        assert len(ppo["losses"]) == 2 and all(math.isfinite(x) for x in ppo["losses"])
        assert ppo["trained_changed_weights"] is True  # the HF export carries the trained weights
    assert results[0]["ppo"]["losses"] == results[1]["ppo"]["losses"]  # TP ranks agree
    assert {r["ppo"]["tp_group_rank"] for r in results} == {0, 1}
    assert (out / "ppo_hf" / "config.json").is_file()
    # evaluation and checkpoint at step 2 (eval_interval = checkpoint_interval = 2)
    assert [e["step"] for e in results[0]["ppo"]["evals"]] == [2] and "reward/mean" in results[0]["ppo"]["evals"][0]
    shards = sorted(p.name for p in (out / "ckpts" / "NeMoPPOTrainer" / "checkpoint_2").iterdir())
    assert shards == ["mp_rank_00_000.pt", "mp_rank_01_000.pt"]


def test_ilql_two_steps_at_tp2_and_q_guided_generation(ranks):
    results, _ = ranks
    for r in results:
        ilql = r["ilql"]
        assert ilql["steps"] == 2 and all(math.isfinite(x) for x in ilql["losses"])
        assert ilql["target_moved"] > 0  # synced every step (steps_for_target_q_sync=1)
        assert 3 <= len(ilql["generated"]) <= 6 and ilql["generated"][:2] == [100, 101]
        assert ilql["checkpoint_round_trip"] is True
        assert ilql["masked_generation"] == [100] * 4  # logit_mask leaves only "a"
    assert results[0]["ilql"]["losses"] == results[1]["ilql"]["losses"]
    assert results[0]["ilql"]["generated"] == results[1]["ilql"]["generated"]  # sampled once, broadcast over TP


def test_sft_two_steps_at_tp2(ranks):
    results, _ = ranks
    for r in results:
        assert r["sft"]["steps"] == 2 and all(math.isfinite(x) and x > 0 for x in r["sft"]["losses"])
    assert results[0]["sft"]["losses"] == results[1]["sft"]["losses"]


def test_ilql_two_steps_at_pp2(ranks):
    results, _ = ranks
    by_stage = {r["ilql_pp2"]["stage"]: r["ilql_pp2"] for r in results}
    assert set(by_stage) == {0, 1}
    assert by_stage[1]["has_heads"] is True and by_stage[0]["has_heads"] is False  # heads on the last stage only
    for r in by_stage.values():
        assert r["steps"] == 2 and len(r["losses"]) == 2 and all(math.isfinite(x) for x in r["losses"])
    assert by_stage[0]["losses"] == by_stage[1]["losses"]  # the last stage's stats reach every stage
