"""trlX's model classes over PEFT adapters keep each module's train/eval flag: a PeftModel
reports training=True at its top over submodules that from_pretrained left in eval mode."""

import pytest
import torch
from torch import nn
from tiny_models import build, left_padded

from rlkit_accelerate.models import (
    AutoModelForCausalLMWithHydraValueHead,
    AutoModelForCausalLMWithILQLHeads,
    AutoModelForCausalLMWithValueHead,
)
from rlkit_accelerate.models.blocks import eval_mode
from rlkit_core.errors import ConfigError

peft = pytest.importorskip("peft")
LORA = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "lora_dropout": 0.5, "target_modules": ["c_attn"]}


def dropouts(model: nn.Module) -> list[bool]:
    """The model's own dropout flags (peft creates its lora_dropout in training mode, as peft does
    everywhere; with B = 0 at the start it changes nothing)."""
    return [m.training for name, m in model.named_modules() if isinstance(m, nn.Dropout) and "lora_dropout" not in name]


def test_eval_mode_gives_every_module_its_own_flag_back():
    model = peft.get_peft_model(build("gpt2", 2).eval(), peft.LoraConfig(r=4, target_modules=["c_attn"]))
    before = [m.training for m in model.modules()]
    assert model.training and not all(before)  # the mixed state from_pretrained + peft leave
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert [m.training for m in model.modules()] == before


@pytest.mark.parametrize("cls", [AutoModelForCausalLMWithValueHead, AutoModelForCausalLMWithHydraValueHead,
                                 AutoModelForCausalLMWithILQLHeads])
def test_from_pretrained_with_peft_leaves_dropout_off_and_forward_repeatable(cls, tmp_path):
    build("gpt2", 2).save_pretrained(tmp_path / "base")
    model = cls.from_pretrained(str(tmp_path / "base"), peft_config=LORA)
    assert dropouts(model) and not any(dropouts(model)), dropouts(model)
    input_ids, attention_mask = left_padded()
    with torch.no_grad():
        first = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).logits
        again = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).logits
    assert torch.equal(first, again)
    if cls is AutoModelForCausalLMWithILQLHeads:
        return
    # a reloaded adapter: peft loads it in eval mode, and so it stays, with the same logits
    with torch.no_grad():
        for name, p in model.base_model.named_parameters():
            if "lora_" in name:  # lora_B non-zero: the adapter matters
                p.add_(0.1 * torch.randn_like(p))
        model.eval()
        trained = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).logits
    model.save_pretrained(tmp_path / "adapter")
    loaded = cls.from_pretrained(str(tmp_path / "adapter"))
    assert not any(m.training for m in loaded.modules() if isinstance(m, nn.Dropout))
    with torch.no_grad():
        reloaded = loaded(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).logits
    torch.testing.assert_close(reloaded, trained)


def test_peft_type_and_task_type_as_peft_members_or_bad_names(tmp_path):
    build("gpt2", 2).save_pretrained(tmp_path / "base")
    lora = dict(LORA, peft_type=peft.PeftType.LORA, task_type=peft.TaskType.CAUSAL_LM)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(str(tmp_path / "base"), peft_config=lora)
    assert model.peft_type == "LORA"
    with pytest.raises(ConfigError, match=r"model.peft_config.task_type: unknown task type 'CAUSAL'; choose one of .*CAUSAL_LM"):
        AutoModelForCausalLMWithValueHead.from_pretrained(str(tmp_path / "base"), peft_config=dict(LORA, task_type="CAUSAL"))
