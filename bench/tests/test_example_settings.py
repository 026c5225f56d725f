"""bench/example_settings.py: every shipped example is either timed or named with the reason it
is not, and the step figures come from the run's metrics file as the engine logs them."""

import json
from pathlib import Path

import pytest

import example_settings

EXAMPLES = Path(example_settings.ROOT) / "examples"


def test_every_shipped_example_is_measured_or_says_why_not():
    shipped = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yml")}
    listed = {spec["yml"] for spec in example_settings.EXAMPLES.values()} | set(example_settings.NOT_MEASURED)
    assert shipped == listed


@pytest.mark.parametrize("loss_key", example_settings.LOSS_KEYS)
def test_the_first_step_is_left_out_and_its_loss_kept(tmp_path, loss_key):
    records = [{"step": 0, "kind": "eval", "time/evaluate": 9.0},
               {"step": 1, "kind": "train", loss_key: 2.5, "cpu/step": 7.0},
               {"step": 2, "kind": "train", loss_key: 2.4, "cpu/step": 0.3},
               {"step": 3, "kind": "train", loss_key: 2.3, "cpu/step": 0.2}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert example_settings.step_seconds(metrics) == ([0.3, 0.2], 2.5)


def test_runs_of_several_result_files_are_pooled_per_mode(tmp_path):
    def run(packing, seconds):
        return {"packing": packing, "rc": 0, "cpu_step": seconds}

    first = {"ppo": example_settings.summary([run(False, [3.0, 3.2]), run(True, [1.0])])}
    second = {"ppo": example_settings.summary([run(True, [2.0, 1.6]), run(False, [2.0])])}
    files = []
    for i, results in enumerate((first, second)):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(results))
    pooled = example_settings.merged(files)["ppo"]
    assert (pooled["padded"], pooled["packed"]) == (3.0, 1.6)  # medians of [3.0, 3.2, 2.0] and [1.0, 2.0, 1.6]
    assert pooled["speedup"] == pytest.approx(3.0 / 1.6)


def test_the_yamls_the_trlx_comparisons_read_keep_the_padded_step():
    """trlX's TRLConfig drops train.packing (walks.trlx_config), so in these files it would make
    rlkit's side run packed against trlX's padded: a different arithmetic from the one compared."""
    import yaml

    import walks

    compared = [walks.EXAMPLES / name for name in walks.METHODS.values()] + [walks.EXAMPLES / "rft_randomwalks.yml"]
    for path in compared:
        assert "packing" not in yaml.safe_load(path.read_text())["train"], path.name
