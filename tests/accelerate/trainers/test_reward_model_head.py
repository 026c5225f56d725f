"""A reward model reads its score head alone: neither its training forward nor its scoring
pass runs the LM head over the vocabulary (docs/benchmarks.md, the reward case)."""

import sys
from pathlib import Path

import pytest
from accelerate.state import AcceleratorState, GradientState

sys.path.insert(0, str(Path(__file__).parent))
import prefs_setup  # noqa: E402

from rlkit_accelerate.engine import AccelerateEngine  # noqa: E402

ORIGINAL_FORWARD = AccelerateEngine._forward


@pytest.mark.slow
def test_reward_model_forwards_skip_the_lm_head(tmp_path, monkeypatch):
    calls = {"forward": 0, "lm head": 0}

    def counting_forward(self, kind, model, batch, want, *, train):
        head = self.unwrapped_model.layout.lm_head
        handle = head.register_forward_hook(lambda *_: calls.__setitem__("lm head", calls["lm head"] + 1))
        try:
            calls["forward"] += 1
            out = ORIGINAL_FORWARD(self, kind, model, batch, want, train=train)
            assert "values" in out and "logprobs" not in out
            return out
        finally:
            handle.remove()

    monkeypatch.setattr(AccelerateEngine, "_forward", counting_forward)
    try:
        prefs_setup.run("reward_model", tmp_path, config_overrides=dict(train=dict(total_steps=2, eval_interval=2)))
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    from rlkit_core.testing.engine import read_records

    evals = [r for r in read_records(tmp_path) if r["kind"] == "eval"]
    assert calls["forward"] > 2 and calls["lm head"] == 0  # 2 training forwards and the held-out scoring
    assert len(evals) == 2 and all(0.0 <= e["metrics/accuracy"] <= 1.0 for e in evals)
