"""Every example YAML validates against the installed plugins, names included."""

from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.run import check_names

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yml") if "plugin_template" not in p.parts)


def test_there_are_examples():
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_config_is_valid(path, rlkit_host):
    config = load_config(path)
    check_names(config, rlkit_host.registry)
