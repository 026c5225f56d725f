"""Install a fake distribution for one test: modules plus a ``.dist-info`` with entry points,
found by ``importlib.metadata`` exactly as a pip-installed plugin is."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Mapping


def write_distribution(
    root: Path,
    name: str,
    entry_points: Mapping[str, str],
    modules: Mapping[str, str],
    *,
    version: str = "1.0.0",
    group: str = "rlkit",
) -> Path:
    """Write ``modules`` (``{"my_plugin": "source"}``) and ``<name>-<version>.dist-info`` under
    ``root``. ``entry_points`` maps entry-point names to ``"module"`` or ``"module:attr"``.
    Put ``root`` on ``sys.path`` (``monkeypatch.syspath_prepend``) to install it."""
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        path = root / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    dist_info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{group}]"] + [f"{ep} = {target}" for ep, target in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist_info


def forget_modules(*names: str) -> None:
    """Drop modules (and their submodules) from ``sys.modules`` so a later import re-reads them."""
    for loaded in list(sys.modules):
        if any(loaded == n or loaded.startswith(n + ".") for n in names):
            del sys.modules[loaded]
