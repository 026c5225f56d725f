"""bench/packing.py: the modes rotate round by round, saved bytes count each storage once, every
mode's first loss is taken at the same weights, and the table's ratio is against the padded
mode of the same precision (a tiny GPT-2 SFT case, one step per mode)."""

from __future__ import annotations

import pytest
import torch

import packing
from packing import MODES, rotate, saved_bytes, table


def test_every_mode_leads_a_round_in_turn():
    orders = [rotate(MODES, r) for r in range(len(MODES))]
    assert [order[0] for order in orders] == list(MODES)
    assert all(sorted(order) == sorted(MODES) for order in orders)


def test_saved_bytes_counts_each_storage_once():
    x = torch.ones(256, requires_grad=True)

    def run():
        y = x * x  # saves x twice: one storage
        return (y.exp()).sum()  # saves exp's output: a second storage of 256 floats

    _, nbytes = saved_bytes(run)
    assert nbytes == 2 * 256 * 4


def test_a_tiny_sft_case_runs_every_mode(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "accelerate" / "trainers"))
    import walks_setup
    from rlkit_accelerate.trainers import AccelerateSFTTrainer

    config = walks_setup.config("sft", tmp_path, train=dict(batch_size=4, seq_length=24))
    config.model.model_path.resid_pdrop = 0.0  # the modes' first losses compare exactly
    trainer = AccelerateSFTTrainer(config)
    trainer.make_experience(["a", "abcdefghijklmnop", "bc", "cdef"] * 3, 24)
    trainer.prepare_learning()
    result = packing.run_case(trainer, rounds=1, steps=1)
    assert result["rows"] == 4 and 0 < result["padding_share"] < 1
    modes = result["modes"]
    # the first losses at the same weights: packed equals padded, bf16 is near fp32
    assert modes["packed fp32"]["loss"] == pytest.approx(modes["padded fp32"]["loss"], rel=1e-5)
    assert modes["bins fp32"]["loss"] == pytest.approx(modes["padded fp32"]["loss"], rel=1e-5)
    assert result["row_attention"]  # GPT-2 runs it: "packed" is the engine's choice between layouts
    assert modes["packed bf16"]["loss"] == pytest.approx(modes["padded bf16"]["loss"], rel=1e-2)
    assert modes["padded bf16"]["loss"] == pytest.approx(modes["padded fp32"]["loss"], rel=1e-2)
    assert all(len(m["samples_per_s_runs"]) == 1 and m["samples_per_s"] > 0 for m in modes.values())
    assert modes["packed fp32"]["saved_mib"] < modes["padded fp32"]["saved_mib"]  # padding costs activations
    assert modes["padded bf16"]["saved_mib"] < modes["padded fp32"]["saved_mib"]  # bf16 activations are half
    lines = table({"tiny": result}).splitlines()
    packed_bf16 = next(line for line in lines if "packed bf16" in line)
    ratio = modes["packed bf16"]["samples_per_s"] / modes["padded bf16"]["samples_per_s"]
    assert packed_bf16.split()[-1] == f"{ratio:.2f}"
