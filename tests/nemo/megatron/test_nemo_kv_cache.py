"""Sampling with megatron-core's KV cache gives the samples of whole-sequence recomputation, at
TP=2 and PP=2 on two CPU processes (kv_cache_worker.py): greedy and seeded sampling of an LM,
and ILQL's Q-guided sampling with a logit mask. With the cache the model runs the prompt once
and then one token per call; either way only the last position reaches the output layer.
No-grad forwards (rollout log-probs, values) run in micro-batches of the YAML's size."""

import json

import pytest

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

CASES = [f"{layout}/{method}" for layout in ("tp2", "pp2") for method in ("sft", "ilql")]
MODES = ("greedy", "sampled")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("kv_cache")
    torchrun("kv_cache_worker.py", str(out), timeout=900)
    return [json.loads((out / f"kv_{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_cached_samples_equal_recomputed_samples_on_every_rank(ranks, case, mode):
    runs = [r[case][f"{mode}/{cache}"]["tokens"] for r in ranks for cache in ("cache", "nocache")]
    assert all(run == runs[0] for run in runs), runs  # both modes, both ranks of the replica
    width, new = ranks[0]["prompt_width"], ranks[0]["new_tokens"]
    assert all(len(row) == width + new for row in runs[0])


@pytest.mark.parametrize("case", CASES)
def test_sampling_is_not_greedy(ranks, case):
    # the seeded sampling runs really sample (so their equality above is not argmax's)
    assert ranks[0][case]["sampled/cache"]["tokens"] != ranks[0][case]["greedy/cache"]["tokens"]


@pytest.mark.parametrize("case", CASES)
def test_the_cache_runs_only_the_new_token_after_the_prompt(ranks, case):
    for r in ranks:
        width, new = r["prompt_width"], r["new_tokens"]
        for mode in MODES:
            assert r[case][f"{mode}/cache"]["run_lengths"] == [width] + [1] * (new - 1)
            assert r[case][f"{mode}/nocache"]["run_lengths"] == [width + i for i in range(new)]


@pytest.mark.parametrize("case", CASES)
def test_only_the_last_position_reaches_the_output_layer(ranks, case):
    for r in ranks:
        stage = r[case]
        last_stage = not case.startswith("pp2") or stage["pp_rank"] == 1
        for mode in MODES:
            for cache in ("cache", "nocache"):
                positions = stage[f"{mode}/{cache}"]["output_positions"]
                assert positions == ([1] * r["new_tokens"] if last_stage else []), (case, mode, cache, positions)


@pytest.mark.parametrize("case", ["tp2/sft", "pp2/sft"])
def test_forwards_run_in_micro_batches_and_equal_smaller_forwards(ranks, case):
    for r in ranks:
        stage = r[case]
        assert stage["micro_batch_size"] == 4
        assert stage["forward"]["rows"] == [4, 2]  # 6 rows: a micro-batch of 4, then the other 2
        assert stage["forward"]["max_diff"] < 1e-5


@pytest.mark.parametrize("method", ["sft", "ilql"])
def test_seeded_sampling_at_tp2_equals_tp1(ranks, method):
    # the tiny YAML's vocabulary (384) is padded to 512 at TP=2 and not at all at TP=1 (the
    # PP=2 layout); sampling from the unpadded logits draws the same tokens from the same seed
    for mode in MODES:
        assert ranks[0][f"tp2/{method}"][f"{mode}/cache"]["tokens"] == ranks[0][f"pp2/{method}"][f"{mode}/cache"]["tokens"], mode


@pytest.mark.parametrize("case", ["tp2/sft", "pp2/sft"])
def test_the_default_generators_logprobs_equal_the_response_forward_on_every_rank(ranks, case):
    """From the sampler's own logits (gathered over TP on the last stage, shared with the other
    stage), within the generator kit's fp32 tolerance."""
    from rlkit_core.testing.generator import LOGPROB_ATOL

    runs = [r[case]["generator"] for r in ranks]
    assert runs[0]["logprobs"] == runs[1]["logprobs"]
    assert all(r["max_diff"] <= LOGPROB_ATOL for r in runs), [r["max_diff"] for r in runs]


@pytest.mark.parametrize("case", ["tp2/sft", "pp2/sft"])
def test_named_weights_gather_every_shard_under_hf_names(ranks, case):
    """A generator with its own weights, zeroed, then synced from the engine: it samples from the
    engine's policy on both ranks (TP shards and PP stages gathered, HF names)."""
    from rlkit_core.testing.generator import LOGPROB_ATOL

    assert all(r[case]["synced_copy"] <= LOGPROB_ATOL for r in ranks), [r[case]["synced_copy"] for r in ranks]
