"""rlkit-methods is pure torch: no engine imports; the entry point and the root import no torch."""

import ast
import subprocess
import sys
from pathlib import Path

import rlkit_methods

PACKAGE = Path(rlkit_methods.__file__).parent
FORBIDDEN = ("accelerate", "nemo", "megatron", "deepspeed", "rlkit_accelerate", "rlkit_nemo")


def imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_no_engine_imports_anywhere_in_the_package():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10
    found = [f"{p.relative_to(PACKAGE)} imports {m}" for p in files for m in imported_modules(p) if m.split(".")[0] in FORBIDDEN]
    assert found == []


def test_importing_everything_loads_no_engine():
    modules = sorted(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
                     for p in PACKAGE.rglob("*.py"))
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\nprint(bad)\nsys.exit(bool(bad))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_plugin_root_and_configs_import_no_torch():
    code = (
        "import sys, rlkit_methods.plugin, rlkit_methods, rlkit_methods.rewards, rlkit_methods.data.sources\n"
        "from rlkit_methods import default_ppo_config, default_ilql_config, default_sft_config\n"
        "default_ppo_config(); default_ilql_config(); default_sft_config()\n"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, "importing rlkit_methods' light modules imports torch " + result.stderr
