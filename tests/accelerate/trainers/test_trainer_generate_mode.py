"""``trainer.generate`` samples without dropout whenever it is called (``learn`` leaves the
model training), and gives the model back in the mode it found it."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from walks_setup import TASK, run  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


@pytest.mark.parametrize("method", ["sft", "ilql"])
def test_generate_is_deterministic_after_learn(method, tmp_path):
    trainer = run(method, tmp_path, config_overrides=dict(train=dict(total_steps=1)))
    batch = trainer.tokenizer(TASK.eval_prompts[:8], return_tensors="pt", padding=True, add_special_tokens=False)
    greedy = dict(max_new_tokens=6, top_k=1, beta=1.0) if method == "ilql" else dict(max_new_tokens=6, do_sample=False)
    trainer.unwrapped_model.train()  # as learn() leaves it: GPT-2's dropout is 0.1
    first = trainer.generate(batch.input_ids, batch.attention_mask, **greedy)
    assert trainer.unwrapped_model.training
    for _ in range(3):
        assert torch.equal(trainer.generate(batch.input_ids, batch.attention_mask, **greedy), first)
    trainer.unwrapped_model.eval()
    assert torch.equal(trainer.generate(batch.input_ids, batch.attention_mask, **greedy), first)
    assert not trainer.unwrapped_model.training


def test_every_dropout_is_on_in_a_training_step_whatever_mode_the_tree_was_in(tmp_path):
    # evaluation gives each module its own flag back, so a model whose top says training over
    # submodules in eval mode (as from_pretrained leaves them) must still learn with dropout on
    trainer = run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=1)))
    model = trainer.unwrapped_model
    for m in model.modules():
        m.training = m is model  # the mixed state: top training, the rest in eval mode
    seen = []
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    handles = [m.register_forward_pre_hook(lambda m, args: seen.append(m.training)) for m in dropouts]
    try:
        trainer.evaluate()
        assert seen and not any(seen)  # evaluation: no dropout
        assert [m.training for m in model.modules()] == [m is model for m in model.modules()]
        seen.clear()
        trainer.train_step(trainer.train_batches(0, 0)[0])
    finally:
        for handle in handles:
            handle.remove()
    assert seen and all(seen)
