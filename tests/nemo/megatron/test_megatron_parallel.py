"""A tiny Megatron GPT with rlkit's heads on two CPU processes (gloo): TP=1 (two
data-parallel replicas), TP=2 and PP=2 on the same weights, for PPO and ILQL. One torchrun
launch runs every layout (megatron_parallel_worker.py); the tests read what each rank saw."""

import json
import math

import pytest

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

METHODS = ("ppo", "ilql")
# heads whose parameters are all split over TP ranks: the TP=1 gradient norm is the
# root-sum-square of the ranks' shard norms
SPLIT_HEADS = {"ppo": "heads.up", "ilql": "heads.q_heads"}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("megatron")
    torchrun("megatron_parallel_worker.py", str(out))
    return [json.loads((out / f"results_{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("method", METHODS)
def test_forward_backward_every_layout_gives_rlkit_methods_loss(ranks, method):
    for r in ranks:
        res = r[method]
        assert res["tp1_loss"] == pytest.approx(res["reference_loss"], rel=1e-5)
        assert res["tp2_loss"] == pytest.approx(res["reference_loss"], rel=1e-5)  # vocab-parallel
    last = next(r[method] for r in ranks if r[method]["pp2_stage"] == 1)
    first = next(r[method] for r in ranks if r[method]["pp2_stage"] == 0)
    assert last["pp2_loss"] == pytest.approx(last["reference_loss"], rel=1e-5)
    assert first["pp2_loss"] is None  # only the last stage computes the loss


@pytest.mark.parametrize("method", METHODS)
def test_tp2_logits_and_heads_equal_tp1_and_agree_on_ranks(ranks, method):
    for r in ranks:
        res = r[method]
        assert res["tp2_logits_max_diff"] < 1e-5
        assert res["tp2_values_max_diff"] < 1e-6
        assert res["tp2_values_equal_on_ranks"] is True
        if method == "ilql":
            assert res["tp2_q_max_diff"] < 1e-6


@pytest.mark.parametrize("method", METHODS)
def test_heads_get_gradients_in_every_layout(ranks, method):
    heads = {"ppo": ("heads.up", "heads.down"), "ilql": ("heads.v_head", "heads.q_heads")}[method]
    for r in ranks:
        res = r[method]
        for layout in ("tp1_grads", "tp2_grads"):
            assert all(res[layout][h] > 0 for h in heads), (layout, res[layout])
            assert res[layout]["embedding"] > 0 and res[layout]["decoder"] > 0
    by_stage = {r[method]["pp2_stage"]: r[method]["pp2_grads"] for r in ranks}
    assert set(by_stage[1]) >= set(heads) and all(by_stage[1][h] > 0 for h in heads)
    assert "heads.up" not in by_stage[0] and by_stage[0]["embedding"] > 0  # heads live on the last stage only


@pytest.mark.parametrize("method", METHODS)
def test_split_gradients_add_up_to_the_tp1_and_pp1_gradients(ranks, method):
    tp1 = ranks[0][method]["tp1_grads"]
    head = SPLIT_HEADS[method]
    tp2 = math.sqrt(sum(r[method]["tp2_grads"][head] ** 2 for r in ranks))
    assert tp2 == pytest.approx(tp1[head], rel=1e-4)
    pp2 = math.sqrt(sum(r[method]["pp2_grads"]["decoder"] ** 2 for r in ranks))
    assert pp2 == pytest.approx(tp1["decoder"], rel=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_full_state_dict_round_trips_through_pipeline_shards(ranks, method):
    assert all(r[method]["pp2_roundtrip_equal"] is True for r in ranks)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_converted_hf_weights_at_tp2_give_the_hf_logits(ranks, kind):
    for r in ranks:
        assert r["convert"][kind]["tp2_vs_hf_max_diff"] < 1e-4
        assert r["convert"][kind]["tp2_gathered_equals_converted"] is True
