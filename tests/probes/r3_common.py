"""Helpers of the round-3 probes: a refusal is judged as in probe_bad_inputs.py, and an input
that is accepted gets the outcome of its class (silent-wrong, hang, security, data-lost)."""

from __future__ import annotations

from pathlib import Path

from probe_bad_inputs import ROOT, classify_refusal, cli
from probe_bad_inputs import handled_call as check  # fn() -> None when right, else (outcome, detail)  # noqa: F401

EX = ROOT / "examples" / "randomwalks"
SFT, PPO, ILQL = str(EX / "sft_randomwalks.yml"), str(EX / "ppo_randomwalks.yml"), str(EX / "ilql_randomwalks.yml")


def validate(config: str, *sets: str) -> list[str]:
    return ["config", "validate", config, *[a for s in sets for a in ("--set", s)]]


def refuse(args: list[str], expect: str, accepted: str = "silent-wrong"):
    """``rlkit ARGS`` must exit non-zero with one ``error:`` line saying ``expect``."""

    def probe():
        code, lines = cli(args)
        outcome, detail = classify_refusal(code, lines, expect)
        return (accepted if outcome == "silent-wrong" else outcome), detail

    return probe


def raises(fn, expect: str, accepted: str = "silent-wrong"):
    """``fn()`` must raise an error whose one line says ``expect``."""

    def probe():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - classified, not hidden
            message = str(exc)
            lines = [line for line in message.splitlines() if line.strip()]
            if expect.lower() not in message.lower():
                return "unclear", f"{type(exc).__name__}: {message[:200]}"
            if len(lines) != 1 and not getattr(exc, "errors", None):
                return "unclear", f"{len(lines)} lines: {message[:200]}"
            return "clear", f"{type(exc).__name__}: {message[:160]}"
        return accepted, "accepted"

    return probe




def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path
