"""load_causal_lm: folders, configs, models, and one-line errors for bad paths."""

from __future__ import annotations

import pytest
import torch
from tiny_models import CONFIGS, build

from rlkit_accelerate.models import load_causal_lm, load_heads, make_head, save_heads
from rlkit_core.errors import RlkitError


def test_from_a_config_builds_fresh_weights():
    model = load_causal_lm(CONFIGS["gpt2"](2))
    assert type(model).__name__ == "GPT2LMHeadModel" and model.config.n_layer == 2


def test_a_built_model_is_returned_as_is():
    model = build("gpt2", num_layers=1)
    assert load_causal_lm(model) is model


def test_from_a_folder(tmp_path):
    model = build("llama", num_layers=1)
    model.save_pretrained(tmp_path)
    loaded = load_causal_lm(str(tmp_path), dtype=torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("path", ["./no/such/model", "/no/such/model", "~/no-such-model-here", "a/b/c"])
def test_missing_folder_is_a_one_line_error(path):
    with pytest.raises(RlkitError) as error:
        load_causal_lm(path)
    assert str(error.value) == f"model_path {path!r}: no such folder"


def test_a_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "model.bin").write_text("not a model")
    with pytest.raises(RlkitError, match="no such folder"):
        load_causal_lm(tmp_path / "model.bin")


def test_a_folder_without_a_model_is_a_one_line_error(tmp_path):
    with pytest.raises(RlkitError) as error:
        load_causal_lm(str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"model_path {str(tmp_path)!r}: cannot load a causal LM") and "\n" not in message


def test_wrong_type_is_an_error():
    with pytest.raises(RlkitError, match="expected a folder, a hub id or a config"):
        load_causal_lm(42)


def test_heads_round_trip_and_mismatch(tmp_path):
    head, other = make_head(8, 1), make_head(8, 1)
    save_heads({"v_head": head, "value_branch": None}, tmp_path / "h.safetensors")
    load_heads({"v_head": other}, tmp_path / "h.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(head.parameters(), other.parameters()))
    with pytest.raises(RlkitError, match="heads do not match"):
        load_heads({"v_head": make_head(4, 1)}, tmp_path / "h.safetensors")
    with pytest.raises(RlkitError, match=r"unexpected heads \['v_head'\]"):
        load_heads({"q_head": None}, tmp_path / "h.safetensors")
