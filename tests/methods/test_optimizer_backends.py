"""trlX's 8-bit optimizer names (``adam_8bit_bnb``, ``adamw_8bit_bnb``): `rlkit config validate`
refuses them in one line when bitsandbytes is not installed (a run used to validate and then
fail at run start), and uses bitsandbytes' classes, with their keyword arguments checked, when
it is (issue 17, trackers and optimizer back-ends)."""

import sys
import types
from pathlib import Path

import pytest

from rlkit_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml"


def validate(capsys, *sets):
    code = main(["config", "validate", str(SFT), *[arg for s in sets for arg in ("--set", s)]])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def fake_bitsandbytes(monkeypatch):
    """A stand-in for bitsandbytes' ``optim`` module with its two 8-bit classes' signatures."""

    class Adam8bit:
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, optim_bits=8):
            pass

    class AdamW8bit(Adam8bit):
        pass

    optim = types.ModuleType("bitsandbytes.optim")
    optim.Adam8bit, optim.AdamW8bit = Adam8bit, AdamW8bit
    package = types.ModuleType("bitsandbytes")
    package.optim = optim
    monkeypatch.setitem(sys.modules, "bitsandbytes", package)
    monkeypatch.setitem(sys.modules, "bitsandbytes.optim", optim)


@pytest.mark.parametrize("name", ["adam_8bit_bnb", "adamw_8bit_bnb", "AdamW_8bit_BNB"])
def test_an_8bit_optimizer_without_bitsandbytes_is_one_line_at_validate(rlkit_host, capsys, monkeypatch, name):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import fails, as when not installed
    code, lines = validate(capsys, f"optimizer.name={name}")
    assert code == 2 and lines == [f"error: optimizer.name: {name.lower()} needs bitsandbytes; pip install bitsandbytes"], lines


def test_an_8bit_optimizer_with_bitsandbytes_validates_and_its_kwargs_are_checked(rlkit_host, capsys, monkeypatch):
    fake_bitsandbytes(monkeypatch)
    code, lines = validate(capsys, "optimizer.name=adamw_8bit_bnb", "optimizer.kwargs={lr: 1.0e-4, optim_bits: 8}")
    assert code == 0 and lines[0].startswith("ok:"), lines
    code, lines = validate(capsys, "optimizer.name=adam_8bit_bnb", "optimizer.kwargs={lr: 1.0e-4, weight_decy: 0.1}")
    assert code == 2 and lines == ["error: optimizer.kwargs.weight_decy: Adam8bit has no such argument; did you mean weight_decay?"], lines
