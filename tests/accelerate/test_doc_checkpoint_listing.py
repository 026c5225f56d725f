"""docs/quickstart.md's "What lands on disk" listing is what a run writes: every name it shows
is there after a short run, and every file a checkpoint holds is named on the page."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent / "trainers"))
from walks_setup import run  # noqa: E402

pytestmark = pytest.mark.slow  # trains a real run (rlkit_core.testing.lanes)


def listing() -> tuple[list[str], list[str]]:
    """(top-level names, names inside checkpoint_<step>/) of the page's listing."""
    page = (ROOT / "docs" / "quickstart.md").read_text()
    block = page.split("## What lands on disk", 1)[1].split("```", 2)[1]
    entries = [re.match(r"^( {0,2})(\S+)(\s|$)", line) for line in block.splitlines()]
    entries = [(len(m.group(1)), m.group(2)) for m in entries if m]
    return [n for indent, n in entries if indent == 0], [n for indent, n in entries if indent == 2]


def test_the_quickstart_listing_is_what_a_run_writes(tmp_path):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2, checkpoint_interval=2)))
    root = tmp_path / "ckpts"
    checkpoint = root / "checkpoint_2"
    top, inside = listing()
    written = {p.name for p in checkpoint.iterdir() if not p.name.startswith(".")}  # hidden: the loop's own markers
    assert {n.replace("<rank>", "0").rstrip("/") for n in inside} == written, (inside, sorted(written))
    for name in top:
        if name.startswith(("checkpoint_<step>", "best_checkpoint")):  # best_checkpoint: with train.save_best
            continue
        assert (root / name.rstrip("/")).exists(), f"quickstart shows {name}, the run wrote {sorted(p.name for p in root.iterdir())}"
