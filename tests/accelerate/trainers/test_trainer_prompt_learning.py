"""Prompt learning (peft's PROMPT_TUNING, P_TUNING, PREFIX_TUNING) through ``model.peft_config``: SFT
trains it on causal and seq2seq models; PPO and ILQL refuse it."""


import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

import rlkit_core as rlkit
import t5_walks_setup
import walks_setup
from rlkit_core.errors import ConfigError
from rlkit_methods.sft.store import make_sft_experience
from walks_setup import TOKENIZER

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

SETUPS = {"causal": walks_setup, "t5": t5_walks_setup}
GREEDY = dict(max_new_tokens=6, do_sample=False, eos_token_id=TOKENIZER.eos_token_id, pad_token_id=TOKENIZER.pad_token_id)


def prompt_learning(kind):
    return {"peft_type": kind, "num_virtual_tokens": 3}


class Snapshot:
    """The model's weights when training starts (after peft wrapped it)."""

    @rlkit.hookimpl
    def rlkit_train_start(self, trainer, config, is_main_process):
        self.state = {k: v.clone() for k, v in trainer.unwrapped_model.state_dict().items()}


def base_model(arch, seed=7):
    """The base model train() builds: the same config and seed."""
    torch.manual_seed(seed)
    if arch == "t5":
        return AutoModelForSeq2SeqLM.from_config(t5_walks_setup.t5_config()).eval()
    return AutoModelForCausalLM.from_config(walks_setup.model_config()).eval()


@pytest.mark.parametrize("arch", ["causal", "t5"])
@pytest.mark.parametrize("kind", ["PROMPT_TUNING", "P_TUNING", "PREFIX_TUNING"])
def test_sft_trains_only_the_virtual_tokens_and_the_adapter_reloads_with_peft(arch, kind, tmp_path):
    from peft import PeftModel

    snapshot = Snapshot()
    trainer = SETUPS[arch].run("sft", tmp_path, plugins=[snapshot], config_overrides=dict(
        model=dict(peft_config=prompt_learning(kind)), train=dict(total_steps=2), optimizer=dict(kwargs=dict(lr=1e-2))))
    assert trainer.iter_count == 2
    model = trainer.unwrapped_model
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, snapshot.state[k])}
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "prompt_encoder.default.embedding.weight" in changed  # the virtual tokens learned
    assert changed <= trained and all(n.startswith("prompt_encoder.") for n in trained), sorted(trained)  # the base did not

    model.eval()  # no dropout in the comparison
    trainer.save_pretrained(tmp_path / "adapter")
    loaded = PeftModel.from_pretrained(base_model(arch), tmp_path / "adapter").eval()
    prompts = TOKENIZER(["b", "c"], return_tensors="pt", add_special_tokens=False)
    out = loaded.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask, **GREEDY)
    if arch == "t5":  # the trainer returns prompt + decoder output without its start token
        out = torch.cat([prompts.input_ids, out[:, 1:]], dim=1)
    assert torch.equal(trainer.generate(prompts.input_ids, prompts.attention_mask, **GREEDY), out)
    batch = dict(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask)
    if arch == "t5":
        batch["decoder_input_ids"] = prompts.input_ids
    assert torch.equal(loaded(**batch).logits, model(**batch).logits)  # the trained virtual tokens, bit for bit

    with pytest.raises(ConfigError, match=f"merge_adapters: {kind} keeps its virtual tokens outside"):
        trainer.save_pretrained(tmp_path / "merged", merge_adapters=True)


@pytest.mark.parametrize("kind", ["PROMPT_TUNING", "PREFIX_TUNING"])
def test_causal_sft_loss_is_peft_own_loss_for_left_and_right_padding(kind, tmp_path):
    """The logits line up with the labels (peft's loss from ``labels`` as the reference), and
    positions follow the real tokens with left padding too, although peft drops position ids
    with virtual tokens."""
    trainer = walks_setup.run("sft", tmp_path, config_overrides=dict(
        model=dict(peft_config=prompt_learning(kind)), train=dict(total_steps=1)))
    trainer.model.eval()
    samples = [["a", "bcd"], ["ab", "cdefg"]]
    batches = {}
    for side in ("left", "right"):
        trainer.tokenizer.padding_side = side
        store = make_sft_experience(samples, trainer.tokenizer, 12)
        batches[side] = store.collate([store[0], store[1]])
        assert batches[side]["attention_mask"][0, 0 if side == "left" else -1] == 0  # the short row is padded on `side`
    right = batches["right"]
    with torch.no_grad():
        expected = trainer.unwrapped_model(input_ids=right["input_ids"], attention_mask=right["attention_mask"],
                                           labels=right["labels"]).loss
        for side, batch in batches.items():
            torch.testing.assert_close(trainer.loss(trainer.engine.forward("tokens", batch), batch)[0], expected)


@pytest.mark.parametrize("method", ["ppo", "ilql"])
@pytest.mark.parametrize("arch", ["causal", "t5"])
def test_ppo_and_ilql_refuse_prompt_learning_in_one_line(method, arch, tmp_path):
    with pytest.raises(ConfigError, match="PREFIX_TUNING .*available for SFT only.*LORA or IA3") as error:
        SETUPS[arch].run(method, tmp_path, config_overrides=dict(model=dict(peft_config=prompt_learning("PREFIX_TUNING"))))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("method", ["sft", "ppo"])
def test_prompt_learning_types_without_plain_virtual_tokens_are_refused(method, tmp_path):
    with pytest.raises(ConfigError, match="MULTITASK_PROMPT_TUNING is not supported; .*PROMPT_TUNING, P_TUNING, PREFIX_TUNING .*LORA"):
        walks_setup.run(method, tmp_path, config_overrides=dict(model=dict(peft_config=prompt_learning("MULTITASK_PROMPT_TUNING"))))
