"""bench/phase_cpu.py: the parts add the ``cpu/`` keys of every record (an evaluation sweep's
included), and the Amdahl bound takes only the sampling away."""

from __future__ import annotations

import pytest

from phase_cpu import amdahl, phase_seconds


def test_parts_sum_every_record_and_every_swept_value():
    records = [{"kind": "rollout", "cpu/rollout_generate": 3.0, "cpu/rollout_forward": 2.0, "cpu/rollout_score": 0.5},
               {"kind": "eval", "cpu/generate@beta=1": 1.0, "cpu/generate@beta=4": 1.5, "time/generate@beta=1": 9.0},
               {"kind": "rollout", "cpu/rollout_generate": 4.0, "cpu/rollout_forward": 1.0},
               {"kind": "train", "losses/loss": 0.3}]
    assert phase_seconds(records) == {"rollout sampling": 7.0, "evaluation sampling": 2.5, "rollout forward": 3.0,
                                      "rollout scoring": 0.5}


def test_the_bound_speeds_up_sampling_alone():
    seconds = {"rollout sampling": 30.0, "evaluation sampling": 10.0, "rollout forward": 20.0}
    assert amdahl(seconds, 100.0, 2.0) == pytest.approx(80.0)  # 60 untouched + 40 / 2
    assert amdahl(seconds, 100.0, 1.0) == pytest.approx(100.0)
    with pytest.raises(SystemExit, match="exceeds --total-cpu 30.0"):
        amdahl(seconds, 30.0, 2.0)
