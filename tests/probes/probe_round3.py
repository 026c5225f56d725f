"""Round 3 of the bad-input probes (issue 32): resume contracts, divergence, the Python API,
plugins, files outside the run and long phases, each classified:

* clear / handled: refused in one line naming the thing, or odd but right;
* unclear: refused, but with a traceback or a line that does not name the thing;
* silent-wrong: accepted although wrong; hang: would run with no word (or never end);
* security: runs code or writes files the user did not ask for; data-lost: another run's
  files (or the user's) destroyed.

    OMP_NUM_THREADS=1 .venv/bin/python tests/probes/probe_round3.py [-v] [--runs] [CLASS ...]

prints one line per probe that is not clear/handled (all with -v) and the counts per class;
exits 1 if any probe is silent-wrong, hang, security or data-lost. The cases are in
``r3_*.py`` beside this file, one module per class; ``test_round3.py`` runs the fast ones
under pytest. ``--runs`` adds end-to-end probes through a real ``rlkit run`` (minutes).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

OUTCOMES = ("clear", "handled", "unclear", "silent-wrong", "hang", "security", "data-lost")
BAD = ("silent-wrong", "hang", "security", "data-lost")
CLASSES = ("files", "code", "hangs", "silent", "divergence", "unclear")


def all_probes(tmp: Path, runs: bool = False, only: tuple[str, ...] = CLASSES) -> list[tuple[str, str, object]]:
    """(class, name, probe) for every probe of the classes in ``only``."""
    import importlib

    probes = []
    for cls in only:
        module = importlib.import_module(f"r3_{cls}")
        folder = tmp / cls
        folder.mkdir(parents=True, exist_ok=True)
        probes += [(cls, name, probe) for name, probe in module.cases(folder)]
        if runs and hasattr(module, "run_cases"):
            probes += [(cls, name, probe) for name, probe in module.run_cases(folder)]
    return probes


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    only = tuple(a for a in argv if a in CLASSES) or CLASSES
    counts: Counter = Counter()
    per_class: dict[str, Counter] = {}
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="rlkit-r3-") as tmp:
        for cls, name, probe in all_probes(Path(tmp), "--runs" in argv, only):
            outcome, detail = probe()
            assert outcome in OUTCOMES, outcome
            counts[outcome] += 1
            per_class.setdefault(cls, Counter())[outcome] += 1
            if verbose or outcome not in ("clear", "handled"):
                print(f"{outcome:13s} [{cls}] {name}: {detail}", flush=True)
    print()
    for cls, c in per_class.items():
        print(f"{cls:11s} " + " | ".join(f"{k}: {c[k]}" for k in OUTCOMES if c[k]))
    total = sum(counts.values())
    print(f"probes tried: {total} | " + " | ".join(f"{k}: {counts[k]}" for k in OUTCOMES) + f" | {time.time() - start:.0f}s")
    return 1 if any(counts[k] for k in BAD) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
