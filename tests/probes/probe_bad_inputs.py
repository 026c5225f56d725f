"""Bad inputs tried as a new (and careless) user would, each classified (issue 16, must-show):

* clear: refused with error lines that start with ``error:``/name the thing (no traceback);
* handled: odd but valid, and the result is right (e.g. a UTF-16 config loads);
* unclear: refused, but the message does not name the thing or is a traceback;
* silent-wrong: accepted although it is wrong (or a wrong result);
* data-lost: files of another run destroyed.

    OMP_NUM_THREADS=1 .venv/bin/python tests/probes/probe_bad_inputs.py [-v] [--runs]

prints one line per probe (with -v) and the counts; exits 1 if any probe is silent-wrong or
data-lost. The cases are in ``cases*.py`` beside this file. CLI probes run ``rlkit`` in this
process (``rlkit_core.cli.main``); function probes call the loop's helpers the trainers use;
``--runs`` adds end-to-end probes through a real ``rlkit run`` in a subprocess (cases_runs.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_NUM_THREADS", "1")

OUTCOMES = ("clear", "handled", "unclear", "silent-wrong", "data-lost")


def cli(args: list[str]) -> tuple[int, list[str]]:
    """``rlkit ARGS`` in this process: exit code and the non-empty stderr lines."""
    from rlkit_core.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        app = sys.modules["rlkit_core.cli.app"]
        app.err_console.file = err  # rich's console caches stderr
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # a traceback is what a user would see
            return 99, traceback.format_exc().splitlines()
        finally:
            app.err_console.file = sys.__stderr__
    return code, [line for line in err.getvalue().splitlines() if line.strip()]


def classify_refusal(code: int, lines: list[str], expect: str) -> tuple[str, str]:
    text = " ".join(lines)
    if code == 0:
        return "silent-wrong", f"exit 0: {text[:160]}"
    if code == 99 or "Traceback" in text or not lines or not all(line.startswith(("error:", "warning:")) for line in lines):
        return "unclear", text[:200]
    if expect.lower() not in text.lower():
        return "unclear", f"does not say {expect!r}: {text[:200]}"
    return "clear", text[:200]


def refuse_cli(args: list[str], expect: str):
    return lambda: classify_refusal(*cli(args), expect)


def accept_cli(args: list[str], check=None):
    """Odd but valid: must exit 0 (and pass ``check`` on the output lines)."""

    def probe():
        code, lines = cli(args)
        if code != 0:
            return "unclear", f"refused a valid input: {' '.join(lines)[:200]}"
        if check is not None and not check(lines):
            return "silent-wrong", " ".join(lines)[:200]
        return "handled", " ".join(lines)[:120]

    return probe


def refuse_call(fn, expect: str, errors=(Exception,)):
    """A function that must raise a one-line error saying ``expect``."""

    def probe():
        try:
            fn()
        except errors as exc:
            message = str(exc)
            lines = [line for line in message.splitlines() if line.strip()]
            if expect.lower() not in message.lower():
                return "unclear", f"{type(exc).__name__}: {message[:200]}"
            if len(lines) != 1 and not getattr(exc, "errors", None):
                return "unclear", f"{len(lines)} lines: {message[:200]}"
            return "clear", f"{type(exc).__name__}: {message[:200]}"
        except BaseException as exc:  # noqa: BLE001 - classified, not hidden
            return "unclear", f"{type(exc).__name__}: {str(exc)[:200]}"
        return "silent-wrong", "accepted"

    return probe


def handled_call(fn):
    """``fn()`` returns None when the behaviour is right, else (outcome, detail)."""

    def probe():
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001
            return "unclear", f"{type(exc).__name__}: {str(exc)[:200]}"
        return result or ("handled", "")

    return probe


def main(argv: list[str]) -> int:
    import cases

    verbose = "-v" in argv
    counts: Counter = Counter()
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="rlkit-probes-") as tmp:
        probes = cases.build(Path(tmp))
        if "--runs" in argv:  # end to end through `rlkit run` (minutes)
            import cases_runs

            probes += cases_runs.run_cases(Path(tmp))
        for name, probe in probes:
            outcome, detail = probe()
            assert outcome in OUTCOMES, outcome
            counts[outcome] += 1
            if verbose or outcome in ("unclear", "silent-wrong", "data-lost"):
                print(f"{outcome:13s} {name}: {detail}")
    total = sum(counts.values())
    print(f"\nprobes tried: {total} | " + " | ".join(f"{k}: {counts[k]}" for k in OUTCOMES) + f" | {time.time() - start:.0f}s")
    return 1 if counts["silent-wrong"] or counts["data-lost"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
