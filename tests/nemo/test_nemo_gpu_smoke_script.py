"""plugins/rlkit_nemo/scripts/gpu_smoke.sh, checked without a GPU: it parses, ``--dry-run``
prints every step's command in order (GPU count from NPROC), every repository file those
commands name exists, the PPO runs start from the folder the SFT run writes, the PP=2 copy of
the Megatron YAML really says PP=2, and the script ends with ``rlkit run`` on the shipped NeMo
PPO example. The example configs themselves validate in tests/methods/test_example_configs.py."""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "plugins" / "rlkit_nemo" / "scripts" / "gpu_smoke.sh"
OUT = "smoke-out"


def dry_run(*args, nproc=2):
    result = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args, OUT], capture_output=True, text=True,
                            env=dict(os.environ, NPROC=str(nproc)), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def commands(output):
    return [line[2:] for line in output.splitlines() if line.startswith("+ ")]


def steps(output):
    return [int(m.group(1)) for m in re.finditer(r"^== (\d+)\.", output, re.M)]


def sets(command):
    words = shlex.split(command.split(" 2>&1 | tee ")[0])
    return dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--set")


def test_the_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.parametrize("nproc, expected", [(1, [1, 2, 3, 4, 5, 7]), (2, [1, 2, 3, 4, 5, 6, 7]), (3, [1, 2, 3, 4, 5, 7]),
                                             (8, [1, 2, 3, 4, 5, 6, 7])])
def test_dry_run_prints_the_steps_in_order(nproc, expected):
    output = dry_run(nproc=nproc)
    assert steps(output) == expected  # step 6 (PP=2) needs an even number of GPUs
    assert f"--nproc_per_node {nproc} plugins/rlkit_nemo/scripts/gpu_smoke.py" in output


def test_every_repository_file_the_commands_name_exists():
    named = set()
    for command in commands(dry_run()) + commands(dry_run("--container")):
        for word in shlex.split(command):
            word = re.sub(r"\[.*\]$", "", word.split("=", 1)[-1])  # plugins/rlkit_nemo[nemo], key=path
            if word.startswith(("plugins/", "examples/")):
                named.add(word)
    assert {"plugins/rlkit_nemo/scripts/gpu_smoke.py", "plugins/rlkit_nemo/scripts/kv_cache_bench.py",
            "examples/nemo/sft_randomwalks.yml", "examples/nemo/ppo_randomwalks.yml",
            "examples/nemo/megatron_randomwalks.yaml"} <= named
    missing = sorted(w for w in named if not (ROOT / w).exists())
    assert not missing, missing


def test_it_ends_with_rlkit_run_on_the_shipped_ppo_example_from_the_sft_export():
    runs = [c for c in commands(dry_run()) if " run examples/nemo/" in c]
    sft, ppo = runs[0], runs[-1]
    assert "rlkit run examples/nemo/sft_randomwalks.yml" in sft
    assert "rlkit run examples/nemo/ppo_randomwalks.yml" in ppo and ppo == commands(dry_run())[-1]
    config = yaml.safe_load((ROOT / "examples" / "nemo" / "sft_randomwalks.yml").read_text())["train"]
    assert config["total_steps"] % config["checkpoint_interval"] == 0  # the last step writes a checkpoint
    export = f"{sets(sft)['train.checkpoint_dir']}/checkpoint_{config['total_steps']}/hf_model"
    assert all(sets(run)["model.model_path"] == export for run in runs[1:])


def test_the_pp2_yaml_copy_says_pp2_and_translates(tmp_path):
    from rlkit_nemo.megatron_config import translate

    (command,) = [c for c in commands(dry_run()) if c.startswith("sed ")]
    sed = shlex.split(command.split(" > ")[0])
    path = tmp_path / "megatron_pp2.yaml"
    path.write_text(subprocess.run(sed, capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    raw = yaml.safe_load(path.read_text())
    assert raw["model"]["pipeline_model_parallel_size"] == 2
    shipped = yaml.safe_load((ROOT / "examples" / "nemo" / "megatron_randomwalks.yaml").read_text())
    for devices in (1, 2, 4, 8):  # the GPU counts the example's comment promises
        translate(dict(shipped, trainer=dict(shipped["trainer"], devices=devices)))
    for devices in (2, 4, 8):
        assert translate(dict(raw, trainer=dict(raw["trainer"], devices=devices)))["strategy"]["pipeline_model_parallel_size"] == 2


def test_container_mode_installs_rlkit_without_its_dependencies():
    output = dry_run("--container")
    pip = [c for c in commands(output) if " -m pip install " in c]
    assert "--no-deps -e . -e plugins/rlkit_methods -e plugins/rlkit_nemo" in pip[0]
    assert not any("torch==" in c or " -m venv " in c for c in commands(output))


def test_bad_options_are_one_line_and_exit_2():
    result = subprocess.run(["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "unknown option --frobnicate" in result.stderr
