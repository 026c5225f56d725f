"""DPO, the reward model and logged_pg (rlkit_methods, written once) on the NeMo engine at TP=2
on two CPU processes, paired as NeMoDPOTrainer, NeMoRewardModelTrainer and NeMoLoggedPGTrainer
(names no plugin registers): the same losses on both TP ranks, and the accelerate engine's
losses on the same model, data and seed within 5e-5 (DPO with its reference precomputed, and
from the engine's frozen reference with num_layers_unfrozen=1); the reward model's export is a plain
AutoModelForSequenceClassification folder. The accelerate side:
tests/conformance/test_preferences_engine.py."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "accelerate" / "trainers"))
import prefs_setup  # noqa: E402

CASES = {"dpo": ("dpo", {}), "dpo_hydra": ("dpo", {"num_layers_unfrozen": 1}),  # as prefs_tp2_worker.py
         "reward_model": ("reward_model", {}), "logged_pg": ("logged_pg", {})}
pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)
STEPS = 3  # as prefs_tp2_worker.py
TOLERANCE = 5e-5  # rlkit_core.testing.cross_engine's atol: TP=2 sums split matrix products in another order


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("prefs_tp2")
    torchrun("prefs_tp2_worker.py", str(out), timeout=1800)
    return [json.loads((out / f"prefs_{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def accelerate_losses(tmp_path_factory):
    """The same runs on the accelerate engine, one process (its plugin registered for each run
    where this venv has not installed its entry point)."""
    from accelerate.state import AcceleratorState, GradientState

    import rlkit_accelerate.plugin
    from rlkit_core.plugins import get_host

    installed = "accelerate" in get_host().registry.names("backend")
    from rlkit_methods.run.metrics_log import read_metrics

    losses = {}
    for case, (method, model) in CASES.items():
        folder = tmp_path_factory.mktemp(f"accelerate_{case}")
        try:
            prefs_setup.run(method, folder, config_overrides=dict(train=dict(total_steps=STEPS), model=model),
                            plugins=[] if installed else [rlkit_accelerate.plugin])
        finally:
            AcceleratorState._reset_state(True)
            GradientState._reset_state()
        losses[case] = [r["loss"] for r in read_metrics(folder / "ckpts" / "logs") if r["kind"] == "train"]
    return losses


@pytest.mark.parametrize("case", list(CASES))
def test_tp2_trains_and_matches_the_accelerate_engine(case, ranks, accelerate_losses):
    first, second = (r[case] for r in ranks)
    assert isinstance(first, dict), first
    assert isinstance(second, dict), second
    assert (first["tp_rank"], second["tp_rank"]) == (0, 1)
    assert first["losses"] == second["losses"]  # one replica: the same step on both ranks
    assert len(first["losses"]) == STEPS
    assert first["has_reference"] == (case == "dpo_hydra")  # otherwise precomputed: no reference model
    assert first["losses"] == pytest.approx(accelerate_losses[case], abs=TOLERANCE), (first["losses"], accelerate_losses[case])


def test_tp2_reward_model_exports_a_sequence_classifier(ranks):
    from transformers import AutoModelForSequenceClassification

    model, info = AutoModelForSequenceClassification.from_pretrained(ranks[0]["reward_model"]["export"], output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert model.config.num_labels == 1 and model.config.pad_token_id == 0
