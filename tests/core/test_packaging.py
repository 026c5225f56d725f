"""Every distribution installs from its wheel as a user expects: a license, full metadata, and
every third-party module it imports declared as a dependency or an extra."""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = {  # project folder -> its package
    ROOT: "rlkit_core",
    ROOT / "plugins" / "rlkit_methods": "rlkit_methods",
    ROOT / "plugins" / "rlkit_accelerate": "rlkit_accelerate",
    ROOT / "plugins" / "rlkit_nemo": "rlkit_nemo",
}
# import name -> distribution, where they differ (or where another declared dependency ships it)
PROVIDED_BY = {
    "yaml": "pyyaml",
    "megatron": "megatron-core",
    "nemo": "nemo-toolkit",
    "tokenizers": "transformers",  # transformers' own dependency
    "click": "typer",
    "lightning": "lightning",
}
# rlkit-core stays light: it imports torch where it reports on it (`rlkit env`, which says so
# when it is missing), and torch/transformers/safetensors in rlkit_core.testing's engine
# conformance kit, which runs only where an engine, and so these, is installed
UNDECLARED_ON_PURPOSE = {"rlkit_core": {"torch", "transformers", "safetensors"}}


def project(folder):
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def normalize(requirement):
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(folder):
    meta = project(folder)
    names = {normalize(r) for r in meta.get("dependencies", [])}
    for extra in meta.get("optional-dependencies", {}).values():
        names |= {normalize(r) for r in extra}
    if folder != ROOT:  # a plugin may use what rlkit-core gives every plugin (typer for commands, ...)
        names |= declared(ROOT)
    return names


def imported(package_dir):
    names = set()
    for path in package_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and not n.startswith("rlkit_") and n != "__future__"}


@pytest.mark.parametrize("folder", list(DISTRIBUTIONS), ids=lambda f: f.name if f != ROOT else "rlkit-core")
def test_metadata_is_complete_and_the_license_ships(folder):
    meta = project(folder)
    assert meta["license"] == "MIT" and meta["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert meta["authors"] == [{"name": "rlkit contributors"}]
    assert (folder / meta["readme"]).is_file()
    assert any(c.startswith("Development Status") for c in meta["classifiers"])
    assert not any(c.startswith("License ::") for c in meta["classifiers"])  # PEP 639: the expression says it


@pytest.mark.parametrize("folder", list(DISTRIBUTIONS), ids=lambda f: f.name if f != ROOT else "rlkit-core")
def test_every_imported_module_is_declared(folder):
    missing = {
        name: PROVIDED_BY.get(name, name)
        for name in imported(folder / DISTRIBUTIONS[folder]) - UNDECLARED_ON_PURPOSE.get(DISTRIBUTIONS[folder], set())
        if normalize(PROVIDED_BY.get(name, name)) not in declared(folder)
    }
    assert not missing, f"{project(folder)['name']} imports {missing} without declaring them"


def test_extras_are_where_the_code_uses_them():
    accelerate = project(ROOT / "plugins" / "rlkit_accelerate")["optional-dependencies"]
    assert {normalize(r) for r in accelerate["peft"]} == {"peft"}
    assert {normalize(r) for r in accelerate["deepspeed"]} == {"deepspeed"}
    assert {normalize(r) for r in accelerate["bnb"]} == {"bitsandbytes"}
    core_test = project(ROOT)["optional-dependencies"]["test"]
    assert "peft" not in {normalize(r) for r in core_test}
