"""Tests and probes write under pytest's tmp_path (or a folder they are given), never to a fixed
path under the system temp folder: two runs at once would read each other's files."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXED = re.compile(r"""["'](?:/tmp|/var/tmp)/[^"'{}]*["']""")


def test_no_test_uses_a_fixed_temp_path():
    found = []
    for path in sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/tests/**/*.py")]):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            # a string compared as data (a tokenizer path never opened) is not a file written
            if FIXED.search(line) and "tokenizer_path" not in line and "trlx_config" not in line:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
