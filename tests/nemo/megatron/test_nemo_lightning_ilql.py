"""ILQL through NeMo 2's Lightning trainer.fit() (MegatronStrategy, Megatron data sampler,
Megatron optimizer), as trlX's NeMo ILQL ran: 2 steps at TP=2 on two CPU processes."""

import json
import math


def test_ilql_fits_two_steps_with_lightning_at_tp2(tmp_path, torchrun):
    torchrun("lightning_ilql_worker.py", str(tmp_path))
    results = [json.loads((tmp_path / f"lightning_{rank}.json").read_text()) for rank in (0, 1)]
    for r in results:
        assert r["global_step"] == 2 and len(r["losses"]) == 2 and all(math.isfinite(x) for x in r["losses"])
        assert 0 < r["embedding_change"] < 0.1  # trained, starting from the HF model's weights
    assert results[0]["losses"] == results[1]["losses"]  # both TP ranks see the same loss
