"""Weights at TP=2 on two CPU processes (checkpoint_tp2_worker.py): GPT-2 with a vocabulary TP=2
cannot split (padded on load, masked, stripped on export) and Llama 3 with llama3 rope scaling,
both read lazily from HF folders, round trip HF -> Megatron -> HF exactly and give HF's logits;
NeMo's layout written at TP=2 reloads at TP=2 and merged at TP=1; trlX's Llama checkpoint
layout loads at TP=2; a model loaded at PP=2 saves one NeMo file per stage, which reload merged
at PP=1."""

import json

import pytest

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("ckpt_tp2")
    torchrun("checkpoint_tp2_worker.py", str(out))
    return [json.loads((out / f"ckpt_{rank}.json").read_text()) for rank in (0, 1)]


def test_gpt2_at_tp2_pads_the_vocabulary_and_round_trips_exactly(ranks):
    for r in ranks:
        g = r["gpt2"]
        assert g["padded_rows_per_rank"] == 31  # 61 -> 62 rows, 31 per rank
        assert g["round_trip_exact"] is True
        assert g["logits_max_diff"] < 1e-4 and g["padded_logits_masked"] is True


def test_llama3_with_rope_scaling_at_tp2_round_trips_and_matches_hf(ranks):
    for r in ranks:
        assert r["llama3"]["round_trip_exact"] is True
        assert r["llama3"]["logits_max_diff"] < 1e-4


def test_nemo_layout_written_at_tp2_reloads_at_tp2_and_tp1(ranks):
    for r in ranks:
        n = r["nemo"]
        assert n["files"] == ["model_config.yaml", "mp_rank_00/model_weights.ckpt", "mp_rank_01/model_weights.ckpt"]
        assert n["tp2_reload_exact"] is True and n["tp2_reload_logits_max_diff"] < 1e-4
        assert n["tp1_merge_exact"] is True


def test_trlx_llama_checkpoint_at_tp2_gives_hf_logits(ranks):
    for r in ranks:
        assert r["trlx"]["tp2_logits_max_diff"] < 1e-4


def test_nemo_layout_written_at_pp2_reloads_merged_at_pp1(ranks):
    for r in ranks:
        p = r["pp2"]
        assert p["files"] == ["model_config.yaml", "tp_rank_00_pp_rank_000/model_weights.ckpt",
                              "tp_rank_00_pp_rank_001/model_weights.ckpt"]
        assert p["pp1_merge_exact"] is True and p["round_trip_exact"] is True
        assert p["logits_max_diff"] < 1e-4


def test_the_export_gathers_the_model_on_the_main_process_alone(ranks):
    # TP=2 (tensor by tensor to TP rank 0) and PP=2 (each stage's dict to the first stage)
    for r in ranks:
        assert r["llama3"]["main_gather"] is True and r["pp2"]["main_gather"] is True


def test_a_streamed_export_at_tp2_and_pp2_reloads_as_the_unstreamed_one(ranks):
    # one layer at a time from the shards, converted and written to capped shards with an index
    assert ranks[1]["streamed"] == {"gpt2_tp2": {"writer": True}, "llama3_tp2": {"writer": True},
                                    "llama3_pp2": {"writer": True}}  # only the main process writes
    for name, s in ranks[0]["streamed"].items():
        assert s["writer"] and s["reload_exact"] and s["index"] and s["shards"] > 1, (name, s)
        # a shard passes its cap only by the one layer that opened it, plus its header
        assert s["largest_shard_over_cap"] <= s["largest_layer_bytes"], (name, s)
