"""bench/sft_vs_trl.py: the batches both sides train, the alternating order, tokens/s over the
steps' CPU time, the refusal of a step that trained other tokens than its batch, and the
summary's ratio and loss-curve gap (no model: the runs are made up)."""

from __future__ import annotations

import pytest

from sft_vs_trl import SIDES, batches_of, check_steps, curve_gap, side_order, summarize, table, tokens_per_s

BATCHES = [[[1, 5, 6], [1, 7]], [[1, 8, 9, 10], [1, 2]]]  # two steps of two rows: 5 and 6 tokens


def step(tokens, loss, cpu=1.0, wall=4.0, rows=2):
    return {"tokens": tokens, "loss": loss, "cpu": cpu, "wall": wall, "rows": rows}


def test_batches_are_consecutive_rows_and_too_few_rows_is_refused():
    rows = [[i] for i in range(7)]
    assert batches_of(rows, 3, 2) == [[[0], [1], [2]], [[3], [4], [5]]]
    with pytest.raises(SystemExit, match="7 reviews make fewer than --steps 3 batches of 3; lower --steps"):
        batches_of(rows, 3, 3)


def test_the_side_that_runs_first_alternates():
    assert [side_order(r)[0] for r in range(4)] == ["rlkit", "trl", "rlkit", "trl"]
    assert all(sorted(side_order(r)) == sorted(SIDES) for r in range(2))


def test_tokens_per_second_counts_cpu_time_unless_told():
    steps = [step(5, 1.0, cpu=1.0, wall=4.0), step(6, 1.0, cpu=1.2, wall=7.0)]
    assert tokens_per_s(steps) == pytest.approx(11 / 2.2)
    assert tokens_per_s(steps, "wall") == pytest.approx(1.0)


def test_a_step_that_counted_padding_or_lost_a_row_is_refused():
    check_steps("trl", [step(5, 1.0), step(6, 1.0)], BATCHES)
    with pytest.raises(SystemExit, match="trl step 1 trained 2 rows / 8 tokens, its batch is 2 rows / 6 tokens"):
        check_steps("trl", [step(5, 1.0), step(8, 1.0)], BATCHES)  # 4 + 4: the short row padded
    with pytest.raises(SystemExit, match="rlkit step 0 trained 1 rows / 5 tokens"):
        check_steps("rlkit", [step(5, 1.0, rows=1), step(6, 1.0)], BATCHES)
    shuffled = [dict(step(5, 1.0), ids=[1, 7, 1, 5, 6]), dict(step(6, 1.0), ids=[1, 8, 9, 10, 1, 2])]
    with pytest.raises(SystemExit, match="trl step 0 trained other tokens than its batch's rows, in order"):
        check_steps("trl", shuffled, BATCHES)  # the same rows and tokens, in another order
    with pytest.raises(SystemExit, match="rlkit ran 1 steps, the spec has 2 batches"):
        check_steps("rlkit", [step(5, 1.0)], BATCHES)


def test_summary_ratio_is_rlkit_over_trl_and_the_gap_is_the_largest_step_difference():
    runs = {
        "rlkit": [{"steps": [step(5, 2.0, cpu=0.5), step(6, 1.5, cpu=0.5)]},
                  {"steps": [step(5, 2.0, cpu=1.0), step(6, 1.5, cpu=1.0)]}],
        "trl": [{"steps": [step(5, 2.001, cpu=2.0), step(6, 1.497, cpu=2.0)]},
                {"steps": [step(5, 2.001, cpu=2.0), step(6, 1.497, cpu=2.0)]}],
    }
    s = summarize(runs)
    assert s["rlkit"]["tokens_per_cpu_s"] == pytest.approx((11 / 1.0 + 11 / 2.0) / 2)  # median of two rounds
    assert s["speedup_cpu"] == pytest.approx(s["rlkit"]["tokens_per_cpu_s"] / (11 / 4.0))
    assert s["loss_gap"] == pytest.approx(0.003)
    assert s["rlkit"]["rounds_repeat"] == 0.0
    assert "rlkit / TRL: 3.00x (CPU)" in table(s)
    with pytest.raises(ValueError, match="loss curves of 2 and 1 steps"):
        curve_gap([1.0, 2.0], [1.0])
