"""``train.packing`` on the NeMo engine: a micro-batch's rows as one packed sequence (each
row's own positions, a block-diagonal causal mask; rlkit_nemo.packing) gives the padded
step's losses, stats and gradients within float error, for SFT (rows left-padded, learned
absolute positions), PPO (a value head), ILQL (heads at state and action indices) and a Llama
(rotary positions, rows right-padded), at TP=1 in this process and TP=2 on two processes
(packing_cases.py). At PP=2 the micro-batches, each collated on its own, differ in length and
are padded to one shape for the schedule (packed ones too): the stats are TP=1's. Keys the
engine does not take are refused in one line."""

import json

import pytest

import packing_cases

pytestmark = pytest.mark.slow  # builds real trainers and steps them (rlkit_core.testing.lanes)
LOSS = {"sft": "loss", "sft_rope": "loss", "ppo": "losses/total_loss", "ilql": "losses/loss"}
RTOL, ATOL = 1e-5, 1e-6  # fp32: the packed attention sums the same terms in another order


@pytest.fixture(scope="module")
def tp1(tmp_path_factory, megatron_cpu):
    return packing_cases.run_cases(tmp_path_factory.mktemp("packing_tp1"))


@pytest.fixture(scope="module")
def parallel(tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("packing_parallel")
    torchrun("packing_parallel_worker.py", str(out), timeout=2400)
    return {name: [json.loads((out / f"{name}_{rank}.json").read_text()) for rank in (0, 1)] for name in ("tp2", "pp2")}


def same_stats(a, b, case):
    assert a.keys() == b.keys() and LOSS[case] in b
    for key in b:
        assert a[key] == pytest.approx(b[key], rel=RTOL, abs=ATOL), (case, key, a[key], b[key])


def same_gradients(result, case):
    assert result["grad_max"] > 1e-3  # a real gradient
    assert result["grad_max_diff"] <= ATOL + RTOL * result["grad_max"], (case, result["grad_max_diff"], result["grad_max"])


def check(result, case):
    assert result["config_packing"] is True  # train.packing reached the engine
    # the padded micro-batches hold padding, the packed ones none: one row of the real tokens
    assert result["first_micro_batch_padding"] > 0
    rows, length = result["shapes_padded"][0]
    assert rows == packing_cases.MICRO and result["shapes_packed"][0] == [1, result["first_micro_batch_tokens"]]
    assert len(result["shapes_packed"]) == len(result["shapes_padded"]) == packing_cases.ITEMS // packing_cases.MICRO
    same_stats(result["packed"], result["padded"], case)
    same_gradients(result, case)


@pytest.mark.parametrize("case", packing_cases.CASES)
def test_packed_steps_equal_padded_steps_at_tp1(case, tp1):
    check(tp1[case], case)


@pytest.mark.parametrize("case", packing_cases.CASES)
def test_packed_steps_equal_padded_steps_at_tp2(case, parallel):
    first, second = (r[case] for r in parallel["tp2"])
    assert (first["tp_rank"], second["tp_rank"]) == (0, 1)
    assert first["packed"] == second["packed"]  # one replica: the same stats on both ranks
    for result in (first, second):
        check(result, case)


@pytest.mark.parametrize("case", packing_cases.CASES)
def test_pp2_steps_micro_batches_of_different_lengths_as_tp1(case, parallel, tp1):
    by_stage = {r[case]["pp_rank"]: r[case] for r in parallel["pp2"]}
    first, last = by_stage[0], by_stage[1]
    assert first["packed"] == last["packed"] and first["padded"] == last["padded"]  # the last stage's stats reach the first
    for result in (first, last):
        same_gradients(result, case)  # each stage's own parameters
    same_stats(last["padded"], tp1[case]["padded"], case)
    same_stats(last["packed"], tp1[case]["padded"], case)
    # the first stage embeds the micro-batches at one shape: the longest (and one packed row)
    lengths = {s[1] for s in tp1[case]["shapes_padded"]}
    assert len(lengths) > 1, lengths  # collated on their own, they differ
    assert {tuple(s) for s in first["shapes_padded"]} == {(packing_cases.MICRO, max(lengths))}
    assert len({tuple(s) for s in first["shapes_packed"]}) == 1 and first["shapes_packed"][0][0] == 1


def test_packing_under_transformer_engine_is_refused_in_one_line(tmp_path, megatron_cpu, monkeypatch):
    """TE's attention ignores an explicit mask: packed rows would attend across rows."""
    import nemo_walks
    import rlkit_nemo.engine
    from rlkit_core.errors import ConfigError

    real = rlkit_nemo.engine.translate
    monkeypatch.setattr(rlkit_nemo.engine, "translate", lambda raw, cpu: real(raw, cpu=cpu, te=True))  # as on a GPU with TE
    cfg = nemo_walks.megatron_cfg()
    cfg["model"]["transformer_engine"] = True
    config = nemo_walks.config("sft", tmp_path, train=dict(packing=True, trainer_kwargs=dict(megatron_cfg=cfg)))
    with pytest.raises(ConfigError, match=r"^train.packing: the NeMo engine packs rows with megatron-core's local attention only"):
        rlkit_nemo.engine.MegatronEngine(config, **config.train.trainer_kwargs)


def test_a_token_budget_is_refused_in_one_line(tmp_path):
    import nemo_walks
    from rlkit_nemo.config_checks import check_config

    config = nemo_walks.config("sft", tmp_path, train=dict(minibatch_tokens=256))
    errors = check_config(config)
    assert len(errors) == 1 and errors[0].startswith("train.minibatch_tokens: the NeMo engine splits a step into micro-batches"), errors
