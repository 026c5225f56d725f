"""bf16 autocast on CPU, the documented option (docs/config.md, "Mixed precision"): with
``ACCELERATE_MIXED_PRECISION=bf16`` the accelerate engine's training forwards, padded and
packed, run their matrix products in bf16 while the weights, the optimizer and the outputs
handed to the loss stay float32; without it everything is float32 (the default)."""

from __future__ import annotations

import pytest
import torch

import walks_setup
from rlkit_accelerate.trainers import AccelerateSFTTrainer


@pytest.mark.parametrize("precision", ["no", "bf16"])
@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_training_forwards_autocast_to_bf16_only_when_asked(precision, packing, tmp_path, monkeypatch):
    if precision == "bf16":
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    else:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    trainer = AccelerateSFTTrainer(walks_setup.config("sft", tmp_path, train=dict(packing=packing)))
    trainer.make_experience(walks_setup.TASK.walks[:8], 12)
    engine = trainer.engine
    dtypes, seen = [], {}
    head = engine.unwrapped_model.get_output_embeddings()
    handle = head.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))

    def loss(outputs, batch):
        seen["logprobs"] = outputs["logprobs"].dtype
        return trainer.loss(outputs, batch)

    before = head.weight.detach().clone()
    stats = engine.step("tokens", [trainer.store[i] for i in range(8)], trainer.collate, loss)
    handle.remove()
    expected = torch.bfloat16 if precision == "bf16" else torch.float32
    assert dtypes == [expected]
    assert seen["logprobs"] == torch.float32 and torch.isfinite(torch.tensor(stats["loss"]))
    assert head.weight.dtype == torch.float32 and not torch.equal(head.weight.detach(), before)  # fp32 weights stepped
