"""The ModelSpec option disable_dropout (DPO, the reward model and logged_pg ask for it, as TRL
disables dropout) on the NeMo engine: a Megatron YAML with dropout trains DPO without it, so
at step 1 the policy equals its precomputed reference and the sigmoid loss is exactly log 2."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "accelerate" / "trainers"))
import nemo_walks  # noqa: E402
import prefs_setup  # noqa: E402

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]


@pytest.mark.parametrize("disable_dropout", [True, False])
def test_dpo_trains_without_the_yamls_dropout(disable_dropout, tmp_path):
    from rlkit_methods.run.metrics_log import read_metrics

    cfg = nemo_walks.megatron_cfg()
    cfg["model"].update(hidden_dropout=0.3, attention_dropout=0.3)
    overrides = dict(train=dict(total_steps=1, trainer="NeMoDPOTrainer", trainer_kwargs=dict(megatron_cfg=cfg)),
                     method=dict(disable_dropout=disable_dropout))
    trainer = prefs_setup.run("dpo", tmp_path, config_overrides=overrides)
    (first,) = [r for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"]
    assert (trainer.engine.module.config.hidden_dropout == 0.0) == disable_dropout
    assert (first["loss"] == pytest.approx(math.log(2), abs=1e-6)) == disable_dropout, first
