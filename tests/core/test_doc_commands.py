"""The commands the docs show, run as shown: the ones that answer in a second (`rlkit config
validate|show`, the refusals of `rlkit run` that come before a model loads) must print the
lines the docs print, and every `rlkit run CONFIG --set ...` the docs give must load. The next
drift between a page and the code fails here rather than on a newcomer's first hour.

Not run here (they train): the figures of a finished run; `docs/quickstart.md`'s checkpoint
listing is checked against a real run in tests/accelerate/test_doc_checkpoint_listing.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def transcripts(page: Path) -> list[tuple[str, list[str]]]:
    """``$ command`` lines of the page's code blocks, each with the output lines under it."""
    found = []
    for block in FENCE.findall(page.read_text()):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:].split("  #")[0].strip(), []))
            elif found and found[-1][1] is not None:
                found[-1][1].append(line)
        found = [(cmd, out) for cmd, out in found]
    return found


def quick_commands() -> list[tuple[str, str, list[str]]]:
    """(page, command, its error/ok lines) for what runs without training: config commands and
    `rlkit run`'s refusals of a missing config, plugin file or model folder."""
    out = []
    for page in PAGES:
        for command, output in transcripts(page):
            words = shlex.split(command)
            if not words or words[0] != "rlkit" or "=" in words[0]:
                continue
            expected = [line for line in output if line.startswith(("error:", "ok:"))]
            if words[1:3] in (["config", "validate"], ["config", "show"]) or (words[1] == "run" and expected and "..." not in output):
                files = [w for w in words[3 if words[1] == "config" else 2:] if w.endswith((".yml", ".py")) and not w.startswith("-")]
                made_up = [f for f in files if not (ROOT / f).exists() and not any("not found" in e for e in expected)]
                if not made_up:  # bad.yml, broken.yml: files the page describes, not in the repository
                    out.append((page.relative_to(ROOT).as_posix(), command, expected))
    return out


QUICK = quick_commands()


def test_the_docs_show_quick_commands_to_check():
    assert len(QUICK) >= 8, QUICK  # the parser still finds them


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """The repository's examples from a fresh clone's root, after the SFT example ran (the
    PPO examples start from its export), with nothing else written yet."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "ckpts" / "randomwalks_sft" / "hf_model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("page, command, expected", QUICK, ids=[f"{p}: {c}" for p, c, _ in QUICK])
def test_a_doc_command_prints_what_the_doc_shows(page, command, expected, rlkit_host, fresh_clone, capsys):
    words = shlex.split(command)[1:]
    if any("no such folder" in line for line in expected):  # the page shows a fresh clone
        import shutil

        shutil.rmtree(fresh_clone / "ckpts")
    code = main(words)
    captured = capsys.readouterr()
    lines: list[str] = []
    for line in captured.err.splitlines():  # the console wraps at its width: join the pieces
        if lines and not line.startswith(("error:", "ok:", "warning:")):
            lines[-1] += line
        else:
            lines.append(line)
    err = [line for line in lines if line.startswith(("error:", "ok:"))]
    # the page's own listing had a broken plugin installed to show how that reads
    expected = [re.sub(r"; plugin 'broken' failed to load \(.*?'\)$", "", line) for line in expected]
    assert err == expected, f"{page}: `{command}` printed {captured.err!r}"
    assert (code == 0) == (not any(line.startswith("error:") for line in expected))


def run_commands() -> list[tuple[str, str]]:
    """Every `rlkit run CONFIG ...` / `rlkit config show CONFIG ...` line in the docs' code blocks
    and inline code that names a config of the repository."""
    out = []
    pattern = re.compile(r"rlkit (?:run|config show) (examples/\S+\.yml)((?: (?:--set|-s) [^\s`]+)*)")
    for page in PAGES:
        for config, sets in pattern.findall(page.read_text()):
            out.append((page.relative_to(ROOT).as_posix(), f"{config}{sets}"))
    return sorted(set(out))


RUNS = run_commands()


@pytest.mark.parametrize("page, command", RUNS, ids=[f"{p}: {c}" for p, c in RUNS])
def test_every_config_the_docs_run_loads_with_its_overrides(page, command, rlkit_host):
    config, *rest = shlex.split(command)
    assert (ROOT / config).is_file(), f"{page}: {config} is not in the repository"
    sets = [rest[i + 1] for i in range(0, len(rest), 2)]
    load_config(ROOT / config, sets)  # a misspelled key or a stale --set is a ConfigError
