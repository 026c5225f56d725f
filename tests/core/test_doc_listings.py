"""What docs/ and the README show of the installed plugins is what they provide: the real
`rlkit plugins` listing in docs/cli.md, and every "unknown method/trainer ...; installed: ..."
line (issue 17, docs drift: cli.md once said the nemo backend registers no trainers, and
later listed none of GRPO, RLOO or RFT's trainers)."""

import json
import re
from pathlib import Path

from rlkit_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INSTALLED = re.compile(r"unknown (method|trainer) '[^']*'; installed: ([\w, ]+?)(?:;|`|$)")


def documented_listing() -> dict[str, str]:
    """docs/cli.md's first `$ rlkit plugins` table: plugin name -> its provides cell, the
    wrapped lines joined."""
    block = (ROOT / "docs" / "cli.md").read_text().split("$ rlkit plugins\n", 1)[1].split("```", 1)[0]
    rows: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells[0]:
            name = cells[0]
            rows[name] = cells[3]
        elif cells[3]:
            rows[name] += " " + cells[3]
    return rows


def real_listing(capsys) -> dict[str, str]:
    assert main(["plugins", "--json"]) == 0
    plugins = json.loads(capsys.readouterr().out)["plugins"]
    return {p["name"]: "; ".join(f"{kind}: {', '.join(names)}" for kind, names in p["provides"].items())
            for p in plugins if p["status"] == "loaded"}


def test_the_plugins_listing_in_cli_md_is_what_the_plugins_provide(rlkit_host, capsys):
    documented, real = documented_listing(), real_listing(capsys)
    assert {"rlkit_methods", "rlkit_accelerate"} <= documented.keys() & real.keys()
    # plugins not installed here (the template, NeMo) are compared where they are
    wrong = {name: (documented[name], real[name]) for name in documented.keys() & real.keys() if documented[name] != real[name]}
    assert not wrong, "docs/cli.md's rlkit plugins listing is stale (documented, real): " + repr(wrong)


def test_every_installed_list_in_the_docs_is_the_registrys(rlkit_host):
    registry = rlkit_host.registry
    checked, wrong = 0, []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for kind, listed in INSTALLED.findall(line):
                names = [n.strip() for n in listed.split(",")]
                if names == ["none"]:
                    continue
                providers = {registry.provider(kind, n) for n in names}
                if None in providers:  # a name that is no longer registered
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {kind}s {names}: not all registered")
                    continue
                # the docs may show a listing with some plugins absent, never a plugin's names in part
                real = sorted(n for n in registry.names(kind) if registry.provider(kind, n) in providers)
                checked += 1
                if names != real:
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {kind}s {names}, registered {real}")
    assert checked >= 3 and not wrong, "\n".join(wrong)
