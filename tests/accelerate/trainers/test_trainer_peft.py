"""LoRA through ``model.peft_config`` for PPO, ILQL and SFT on a causal LM."""


import pytest
import torch
from transformers import AutoModelForCausalLM

from rlkit_core.errors import ConfigError
from walks_setup import TOKENIZER, model_config, run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

LORA = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["c_attn"], "lora_dropout": 0.0}
GREEDY = dict(max_new_tokens=6, do_sample=False, eos_token_id=TOKENIZER.eos_token_id, pad_token_id=TOKENIZER.pad_token_id)


def lora(method, tmp_path, total_steps=2):
    return run(method, tmp_path, config_overrides=dict(model=dict(peft_config=LORA), train=dict(total_steps=total_steps)))


def base_weights(seed=7):
    """The base model train() builds: the same config and seed."""
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(model_config()).eval()


@pytest.mark.parametrize("method, heads", [("ppo", ("v_head",)), ("ilql", ("ilql_heads",)), ("sft", ())])
def test_only_adapters_and_heads_change(method, heads, tmp_path):
    initial = {k: v.clone() for k, v in base_weights().state_dict().items()}
    trainer = lora(method, tmp_path)
    changed, unchanged = set(), set()
    for name, value in trainer.unwrapped_model.state_dict().items():
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "")
        for prefix in ("base_model.", "reference."):
            base_name = base_name.removeprefix(prefix)
        if "lora_" in name or name.split(".")[0] in heads:
            continue
        assert base_name in initial, name
        (unchanged if torch.equal(value, initial[base_name]) else changed).add(name)
    assert not changed, sorted(changed)
    trained = [n for n, p in trainer.unwrapped_model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n or n.split(".")[0] in heads for n in trained), trained
    lora_b = [v for n, v in trainer.unwrapped_model.state_dict().items() if "lora_B" in n]
    assert any(v.abs().sum() > 0 for v in lora_b)  # the adapters did learn (B starts at 0)


def test_with_adapters_disabled_the_reference_is_the_base_model(tmp_path):
    trainer = lora("ppo", tmp_path, total_steps=4)
    batch = TOKENIZER(["bcd", "e"], return_tensors="pt", padding=True, add_special_tokens=False)
    policy = trainer.unwrapped_model
    reference = policy.forward_reference(batch.input_ids, batch.attention_mask)
    assert torch.equal(reference, base_weights()(**batch, position_ids=(batch.attention_mask.cumsum(-1) - 1).clamp(min=0)).logits)
    policy.eval()
    assert not torch.equal(policy(batch.input_ids, batch.attention_mask).logits, reference)  # the adapters moved


def test_adapter_export_loads_with_peft_and_the_merged_export_with_plain_transformers(tmp_path):
    from peft import PeftModel

    trainer = lora("ppo", tmp_path, total_steps=4)
    prompts = TOKENIZER(["b", "c"], return_tensors="pt", add_special_tokens=False)
    policy = trainer.unwrapped_model.base_model.eval()
    expected = policy.generate(**prompts, **GREEDY)

    adapter = tmp_path / "ckpts" / "checkpoint_4" / "hf_model"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "value_head.safetensors").is_file()
    loaded = PeftModel.from_pretrained(base_weights(), adapter).eval()
    assert torch.equal(loaded.generate(**prompts, **GREEDY), expected)

    merged_dir = tmp_path / "merged"
    trainer.save_pretrained(merged_dir, merge_adapters=True)
    merged, info = AutoModelForCausalLM.from_pretrained(merged_dir, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert torch.equal(merged.eval().generate(**prompts, **GREEDY), expected)


@pytest.mark.parametrize(
    "method, peft_config, message",
    [
        ("sft", dict(LORA, target_modules=["q_proj"]), "model.peft_config: Target modules .*q_proj.* not found.*linear layers are named .*c_attn"),
        ("sft", {"peft_type": "NOT_A_METHOD", "r": 4}, "model.peft_config.peft_type: unknown peft type 'NOT_A_METHOD'; choose one of .*LORA"),
        ("ppo", {"peft_type": "PROMPT_TUNING", "num_virtual_tokens": 4}, "model.peft_config: PROMPT_TUNING .*available for SFT only.*LORA or IA3"),
    ],
)
def test_bad_peft_configs_are_one_line_errors(method, peft_config, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        run(method, tmp_path, config_overrides=dict(model=dict(peft_config=peft_config)))
