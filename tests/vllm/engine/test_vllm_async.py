"""Asynchronous rollouts with the vLLM generator (issue 27): GRPO samples each next phase in a
thread beside training, from the weights of the phase's start."""

import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "accelerate" / "trainers"))
from test_vllm_generator import PROMPTS, grpo_run  # noqa: E402

from rlkit_core.testing.engine import read_records  # noqa: E402
from rlkit_core.testing.generator import check_generator_logprobs  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


def test_async_grpo_samples_through_vllm_beside_training(tmp_path):
    from accelerate.state import AcceleratorState, GradientState

    trainer = None
    try:
        trainer = grpo_run(tmp_path, total_steps=6, async_rollouts=True)  # 2 steps a phase: phases 0, 1, 2 (+3 ahead)
        phases = [r for r in read_records(tmp_path) if r["kind"] == "rollout"]
        assert [(r["async/staleness"], r["async/policy_version"]) for r in phases] == [(0, 0), (1, 0), (1, 2)]
        assert phases[0]["policy/logprob_gap_max"] < 1e-4  # the same policy: vLLM agrees with the trainer
        assert {e.version for e in trainer.store.history} == {2}
        # phase 3 was planned at step 4 and sampled beside steps 5-6: vLLM holds step 4's weights
        assert trainer.generator.version == 4 and trainer.iter_count == 6
        assert not [t for t in threading.enumerate() if t.name.startswith("rlkit-rollouts")]
        check_generator_logprobs(trainer, PROMPTS)  # evaluation's sampler: the trained policy
    finally:
        if trainer is not None:
            trainer.generator.close()
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
