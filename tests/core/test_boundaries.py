"""The dependency rules of ARCHITECTURE.md §1, checked on the import statements."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "rlkit_core": ROOT / "rlkit_core",
    "rlkit_methods": ROOT / "plugins/rlkit_methods/rlkit_methods",
    "rlkit_accelerate": ROOT / "plugins/rlkit_accelerate/rlkit_accelerate",
    "rlkit_nemo": ROOT / "plugins/rlkit_nemo/rlkit_nemo",
}


def imports(path: Path, *, top_level_only: bool = False):
    """(module, line) for every import in a file; top-level ones only if asked."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def offending(package: str, forbidden: tuple[str, ...], *, top_level_only=False):
    found = []
    for path in sorted(PACKAGES[package].rglob("*.py")):
        for module, line in imports(path, top_level_only=top_level_only):
            if module.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return found


def test_core_imports_no_plugin():
    assert offending("rlkit_core", ("rlkit_methods", "rlkit_accelerate", "rlkit_nemo")) == []


def test_core_imports_torch_and_transformers_only_inside_functions():
    assert offending("rlkit_core", ("torch", "transformers", "accelerate"), top_level_only=True) == []


def test_methods_never_import_engines():
    assert offending("rlkit_methods", ("accelerate", "nemo", "megatron", "rlkit_accelerate", "rlkit_nemo")) == []


@pytest.mark.parametrize("backend, other", [("rlkit_accelerate", "rlkit_nemo"), ("rlkit_nemo", "rlkit_accelerate")])
def test_backends_never_import_each_other(backend, other):
    assert offending(backend, (other,)) == []


ENGINE_KIT = "rlkit_methods.engine_kit"


@pytest.mark.parametrize("engine", ["rlkit_accelerate", "rlkit_nemo"])
def test_engines_import_nothing_of_the_methods_but_the_engine_kit(engine):
    """Engines share plumbing through rlkit_methods.engine_kit, never through a method's internals
    (ARCHITECTURE.md §4); the trainers they run are paired by the core (rlkit_core.pairing)."""
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(PACKAGES[engine].rglob("*.py"))
        for module, line in imports(path)
        if module.split(".")[0] == "rlkit_methods" and module != ENGINE_KIT
    ]
    assert found == []


def test_only_the_cli_imports_the_cli():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in (ROOT / "rlkit_core").rglob("*.py")
        if "cli" not in path.relative_to(ROOT / "rlkit_core").parts
        and path.name != "__main__.py"  # `python -m rlkit_core` is the CLI's other entry point
        for module, line in imports(path)
        if module.startswith("rlkit_core.cli")
    ]
    assert found == []


def test_importing_every_core_module_and_plugin_entry_point_loads_no_torch():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "rlkit_core").rglob("*.py")
    )
    modules += ["rlkit_methods.plugin", "rlkit_accelerate.plugin", "rlkit_nemo.plugin"]
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += "heavy = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]\nprint(heavy)\nsys.exit(bool(heavy))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_trlx_compatibility_loads_only_when_a_trlx_name_is_used():
    """The engines' and the loop's modules import no trlX-shaped module (the trlX model classes,
    rlkit_nemo.lightning); asking for a trlX name imports it."""
    compat = ("rlkit_accelerate.models.trlx_base", "rlkit_accelerate.models.trlx_ppo", "rlkit_accelerate.models.trlx_ilql",
              "rlkit_nemo.lightning")
    code = (
        "import sys\n"
        "import rlkit_accelerate.engine, rlkit_accelerate.build, rlkit_accelerate.models, rlkit_nemo, rlkit_nemo.engine\n"
        "import rlkit_methods.loop.trainer, rlkit_methods.ppo.trainer, rlkit_methods.ilql.trainer, rlkit_methods.sft.trainer\n"
        f"loaded = [m for m in {compat!r} if m in sys.modules]\n"
        "from rlkit_accelerate.models import AutoModelForCausalLMWithILQLHeads\n"
        "from rlkit_nemo import megatron_trainer\n"
        f"print(loaded, [m for m in {compat!r} if m not in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[] []"
