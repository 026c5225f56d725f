"""Figures quoted in the README and docs come from one place, where they were measured: each
quantity below has one source line, and every other mention of it must quote the same number."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# quantity -> (source file, regex matching the one line where it was measured, regex matching
# any line that quotes it; both capture the number)
FIGURES = {
    "rlkit --help start-up vs the bare import": (
        "docs/benchmarks.md",
        r"^\| rlkit --help \|.*\| (\d+\.\d+)x slower \|$",
        r"rlkit --help`?[^\n]*?\b(\d+\.\d+)x",
    ),
    "PPO step vs TRL, unfrozen=2": (
        "docs/benchmarks.md",
        r"^\| rlkit unfrozen=2 \|.*\| (\d+\.\d+)x faster \|",
        r"(?:unfrozen=2|unfrozen: 2|num_layers_unfrozen=2)`?\)?[^\n|]*?\b(\d+\.\d+)x faster",
    ),
}


TARGET = re.compile(r"(?:target|within|at least|at most)(?: of)? \d+(?:\.\d+)?x", re.I)  # a goal, not a measurement


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("quantity", list(FIGURES))
def test_every_quote_of_a_figure_matches_its_source(quantity):
    source, measured, quoted = FIGURES[quantity]
    found = [m.group(1) for line in lines(ROOT / source) if (m := re.search(measured, line))]
    assert len(found) == 1, f"{quantity}: {source} should measure it once, found {found}"
    value = found[0]
    wrong = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in DOCS
        for i, line in enumerate(lines(path), 1)
        for number in re.findall(quoted, re.sub(TARGET, "", line))
        if number != value
    ]
    assert not wrong, f"{quantity} is {value} in {source}; these quote another figure:\n" + "\n".join(wrong)


def test_the_main_job_figures_in_the_readme_are_the_plotted_run():
    """README quotes the run whose logs are in docs/images/ppo_smollm2/logs and whose plot is
    docs/images/main_job.png (`rlkit report docs/images/ppo_smollm2` draws it again)."""
    import json

    logs = ROOT / "docs" / "images" / "ppo_smollm2" / "logs"
    records = [json.loads(line) for line in (logs / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in records if r["kind"] == "eval"]
    before, after = evals[0]["reward/mean"], evals[-1]["reward/mean"]
    steps = max(r["step"] for r in records)
    readme = (ROOT / "README.md").read_text()
    quote = f"from **{before:.3f} to {after:.3f} ({after - before:+.2f}) in {steps} PPO steps**"
    assert quote in readme.replace("\n", " "), f"README should say: {quote}"
    assert (ROOT / "docs" / "images" / "main_job.png").is_file()
