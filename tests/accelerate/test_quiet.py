"""Third-party noise silenced at its source: transformers' bars around loading and the GGUF
conversion, DeepSpeed's 'Setting accelerator to CPU' on a machine without CUDA."""

import os
import subprocess
import sys

import pytest
from transformers.utils import logging as hf_logging

from rlkit_accelerate.quiet import deepspeed_on_cpu_quietly, no_transformers_progress


def test_progress_bars_are_off_inside_and_restored_after():
    hf_logging.enable_progress_bar()
    with no_transformers_progress():
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a user who switched them off keeps them off
    with no_transformers_progress():
        pass
    assert not hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()


def test_the_gguf_readers_own_bar_is_off_inside_and_back_after(capfd):
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm
    with no_transformers_progress():
        for _ in gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
    assert "Converting" not in capfd.readouterr().err
    assert gguf_utils.tqdm is original


def test_loading_a_model_prints_no_bar(tmp_path, capfd):
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlkit_accelerate.models.loading import load_lm

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=64)).save_pretrained(tmp_path / "m")
    capfd.readouterr()
    load_lm(str(tmp_path / "m"))
    assert "Loading weights" not in capfd.readouterr().err


def test_saving_a_model_prints_no_bar(tmp_path, capfd):
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlkit_accelerate.models.adapters import save_base_model

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=64))
    capfd.readouterr()
    save_base_model(model, tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").is_file()
    assert "Writing model shards" not in capfd.readouterr().err


@pytest.mark.skipif(__import__("importlib").util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_deepspeed_is_told_the_cpu_instead_of_warning():
    code = ("from rlkit_accelerate.quiet import deepspeed_on_cpu_quietly; deepspeed_on_cpu_quietly(); "
            "import deepspeed, os; print(os.environ.get('DS_ACCELERATOR'))")
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cpu" and "Setting accelerator to CPU" not in result.stderr
    # the user's choice stands
    env["DS_ACCELERATOR"] = "cpu"
    code = "from rlkit_accelerate.quiet import deepspeed_on_cpu_quietly; deepspeed_on_cpu_quietly(); import os; print(os.environ['DS_ACCELERATOR'])"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "cpu"


def test_find_layout_passes_a_mask(capfd):
    """The layout probe's dummy ids may hold the pad id: with a mask transformers has nothing to warn about."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlkit_accelerate.models.blocks import find_layout

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=64, pad_token_id=0))
    capfd.readouterr()
    find_layout(model)
    assert "attention_mask" not in capfd.readouterr().err


class _ForceToken:
    """A logits processor that makes every sampled token ``token`` (here the pad id)."""

    def __init__(self, token):
        self.token = token

    def __call__(self, input_ids, scores):
        scores[:] = float("-inf")
        scores[:, self.token] = 0.0
        return scores


def test_generating_a_pad_token_is_not_a_missing_mask_warning(monkeypatch):
    """transformers 5 does not pass generate's mask on to each decoding step's forward: a sampled
    pad id made the model warn about a mask rlkit gave. The check is off inside rlkit's generate
    only, on the model's own instances, and back after."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList, PreTrainedModel

    from rlkit_accelerate.quiet import no_padding_warning

    warned = []
    real = PreTrainedModel.warn_if_padding_and_no_attention_mask

    def spy(self, input_ids, attention_mask):
        if attention_mask is None and self.config.pad_token_id in input_ids[:, [-1, 0]]:
            warned.append(tuple(input_ids.shape))
        return real(self, input_ids, attention_mask)

    monkeypatch.setattr(PreTrainedModel, "warn_if_padding_and_no_attention_mask", spy)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=64, pad_token_id=0)).eval()
    ids = torch.tensor([[5, 6], [7, 8]])

    def sample():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                              logits_processor=LogitsProcessorList([_ForceToken(0)]), pad_token_id=0, eos_token_id=None)

    sample()
    assert warned, "the case this guards against no longer happens: transformers now passes the mask on"
    warned.clear()
    with no_padding_warning(model):
        out = sample()
    assert warned == [] and out[:, 2:].eq(0).all()  # the same samples, no warning
    assert all("warn_if_padding_and_no_attention_mask" not in vars(m) for m in model.modules())
    sample()
    assert warned  # restored after
