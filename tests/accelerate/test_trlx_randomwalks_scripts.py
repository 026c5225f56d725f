"""trlX's own randomwalks scripts run on rlkit with only their import lines changed.

The scripts (tests/fixtures/trlx/examples/randomwalks, copied from trlX 0.7) are rewritten by
the import table of docs/migrating-from-trlx.md, and nothing else: every other line stays
as trlX wrote it. They are then run through their own ``main(hparams)``, trlX's way to
override settings, shrunk to a few steps; the hub model and tokenizer they name
(``CarperAI/randomwalks``) are replaced by a model built from a config and rlkit's built-in
23-token randomwalks tokenizer, as a user without the hub would.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import transformers

import rlkit_core as rlkit

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "fixtures" / "trlx" / "examples" / "randomwalks"
GUIDE = ROOT / "docs" / "migrating-from-trlx.md"


def import_table() -> dict[str, str]:
    """trlX dotted path -> rlkit dotted path, from the guide's import table."""
    text = GUIDE.read_text()
    start = text.index("## Import paths\n")
    rows = [line for line in text[start : text.index("\n## ", start + 1)].splitlines() if line.startswith("| `")]
    table = {}
    for row in rows:
        trlx, rlkit_path = (cell.strip().strip("`") for cell in row.strip("|").split("|")[:2])
        table[trlx] = rlkit_path
    return table


def rewrite_imports(source: str, table: dict[str, str]) -> str:
    """Replace each trlX (and trlX ``examples``) import statement by rlkit imports of the
    same names; every other line is left as it is."""
    lines = source.splitlines()
    replacements = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "trlx" for a in node.names):
            new = [f"import {table[a.name]} as {a.asname or a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("trlx", "examples"):
            by_module = defaultdict(list)
            for alias in node.names:
                target = table[f"{node.module}.{alias.name}"]
                module, _, name = target.rpartition(".")
                by_module[module].append(name if name == (alias.asname or alias.name) else f"{name} as {alias.asname or alias.name}")
            new = [f"from {module} import {', '.join(names)}" for module, names in by_module.items()]
        else:
            continue
        replacements[node.lineno - 1] = (node.end_lineno, new)
    out, i = [], 0
    while i < len(lines):
        if i in replacements:
            end, new = replacements[i]
            out += new
            i = end
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out) + "\n"


def non_import_lines(source: str) -> list[str]:
    tree = ast.parse(source)
    skip = {n for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
            for n in range(node.lineno - 1, node.end_lineno)}
    return [line for i, line in enumerate(source.splitlines()) if i not in skip]


def load(script: str, tmp_path: Path):
    original = (SCRIPTS / script).read_text()
    rewritten = rewrite_imports(original, import_table())
    assert non_import_lines(rewritten) == non_import_lines(original)  # only import lines changed
    assert "trlx." not in "\n".join(l for l in rewritten.splitlines() if l.startswith(("import", "from")))
    path = tmp_path / script
    path.write_text(rewritten)
    spec = importlib.util.spec_from_file_location(f"trlx_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)  # builds the script's default_config, as trlX does on import
    finally:
        sys.modules.pop(spec.name, None)
    return module, rewritten


class Steps:
    def __init__(self):
        self.steps, self.trainer, self.evaluations = 0, None, []

    @rlkit.hookimpl
    def rlkit_step_end(self, trainer, step, metrics, is_main_process):
        self.steps, self.trainer = step, trainer

    @rlkit.hookimpl
    def rlkit_evaluation_end(self, trainer, step, metrics, samples, is_main_process):
        self.evaluations.append(metrics)


def shrink(tmp_path: Path, **extra) -> dict:
    """trlX's hparams: a few steps, a model from a config and the built-in tokenizer."""
    return {
        "model.model_path": transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=23, n_positions=32,
                                                    bos_token_id=21, eos_token_id=21, pad_token_id=22),
        "tokenizer.tokenizer_path": "randomwalks",
        "train.total_steps": 3,
        "train.eval_interval": 3,
        "train.checkpoint_interval": 3,
        "train.checkpoint_dir": str(tmp_path / "ckpts"),
        "train.batch_size": 16,
        **extra,
    }


def test_the_rewrite_touches_only_trlx_imports(tmp_path):
    _, rewritten = load("rft_randomwalks.py", tmp_path)
    imports = [l for l in rewritten.splitlines() if l.startswith(("import", "from"))]
    assert imports == [
        "import rlkit_core as trlx",
        "from rlkit_methods.rewards.randomwalks import generate_random_walks",
        "from rlkit_core.config import ModelConfig, OptimizerConfig, SchedulerConfig, TokenizerConfig, TrainConfig, TRLConfig",
        "from rlkit_methods.rft.config import RFTConfig",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("script, hparams", [
    ("ppo_randomwalks.py", {"method.num_rollouts": 16, "method.chunk_size": 16, "method.ppo_epochs": 1}),
    ("ilql_randomwalks.py", {}),
    ("rft_randomwalks.py", {"method.n_generations_per_prompt": 2}),
])
def test_trlx_randomwalks_script_runs_with_only_its_imports_changed(script, hparams, tmp_path, rlkit_host, register_plugin):
    module, _ = load(script, tmp_path)
    seen = register_plugin(Steps())
    module.main(shrink(tmp_path, **hparams))
    assert seen.steps == 3
    assert seen.trainer.config.train.trainer == module.default_config.train.trainer
    # every evaluation scored the walks with the script's metric_fn (ILQL: once per beta of its sweep)
    assert seen.evaluations and all(any(k.startswith("metrics/optimality") for k in e) for e in seen.evaluations)
    assert (tmp_path / "ckpts" / "checkpoint_3" / "hf_model" / "config.json").is_file()
