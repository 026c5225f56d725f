"""PromptPipeline, file sources and micro-batching."""

import json

import pytest
import torch

from rlkit_methods.data.batching import MiniBatchIterator, micro_batches
from rlkit_methods.data.prompts import PromptPipeline
from rlkit_methods.data.sources import file_source
from rlkit_methods.ppo.store import PPORLBatch


def test_prompts_are_left_padded_with_positions_and_metadata(tokenizer):
    prompts = [{"prompt": "hello world", "label": 1}, {"prompt": "the", "label": 0}]
    pipeline = PromptPipeline(prompts, 16, tokenizer)
    assert prompts[0] == {"prompt": "hello world", "label": 1}  # the caller's dicts are untouched
    batch = next(iter(pipeline.create_loader(2)))
    n0, n1 = (len(tokenizer(p["prompt"], add_special_tokens=False).input_ids) for p in prompts)
    width = max(n0, n1)
    assert batch["input_ids"].shape == (2, width)
    assert batch["attention_mask"][1].tolist() == [0] * (width - n1) + [1] * n1
    assert batch["input_ids"][1, : width - n1].eq(tokenizer.pad_token_id).all()
    assert batch["position_ids"][1].tolist() == [0] * (width - n1) + list(range(n1))
    assert batch["label"] == [1, 0]


def test_long_prompt_is_truncated_with_a_warning_never_dropped(tokenizer):
    long_prompt = "the movie was great and the acting was wonderful " * 4
    with pytest.warns(UserWarning, match=r"1 prompt\(s\) longer than 5 tokens .* truncated"):
        pipeline = PromptPipeline(["hello", long_prompt], 5, tokenizer)
    assert len(pipeline) == 2
    full = tokenizer(long_prompt, add_special_tokens=False).input_ids
    assert pipeline[1]["input_ids"] == full[:5]


def test_left_truncation_keeps_the_end(make_tokenizer):
    tokenizer = make_tokenizer(truncation_side="left")
    text = "hello world, this is a tiny corpus"
    with pytest.warns(UserWarning):
        pipeline = PromptPipeline([text], 3, tokenizer)
    assert pipeline[0]["input_ids"] == tokenizer(text, add_special_tokens=False).input_ids[-3:]


def test_empty_prompt_becomes_bos_and_bad_prompts_are_errors(tokenizer):
    assert PromptPipeline([""], 8, tokenizer)[0]["input_ids"] == [tokenizer.bos_token_id]
    with pytest.raises(ValueError, match="prompts: the list is empty"):
        PromptPipeline([], 8, tokenizer)
    with pytest.raises(ValueError, match=r"prompts\[1\]: expected a string, got int"):
        PromptPipeline(["ok", 3], 8, tokenizer)
    with pytest.raises(ValueError, match=r"prompts\[0\]: a dict prompt needs a 'prompt' key"):
        PromptPipeline([{"text": "x"}], 8, tokenizer)


def test_file_sources(tmp_path):
    (tmp_path / "p.txt").write_text("first prompt\n\nsecond prompt\n")
    assert file_source(str(tmp_path / "p.txt")) == ["first prompt", "second prompt"]

    rows = [{"sample": "good", "reward": 1}, {"sample": ["q", "a"], "reward": -0.5}]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert file_source(str(tmp_path / "s.jsonl")) == [{"sample": "good", "reward": 1.0}, {"sample": ["q", "a"], "reward": -0.5}]

    (tmp_path / "m.jsonl").write_text(json.dumps({"prompt": "hi", "topic": "x"}) + "\n" + json.dumps("plain"))
    assert file_source(str(tmp_path / "m.jsonl")) == [{"prompt": "hi", "topic": "x"}, "plain"]

    (tmp_path / "r.csv").write_text("review,label\ngreat film,1\nbad film,0\n")
    assert file_source(str(tmp_path / "r.csv"), column="review", reward_column="label") == [
        {"sample": "great film", "reward": 1.0}, {"sample": "bad film", "reward": 0.0}]
    assert file_source(str(tmp_path / "r.csv"), limit=1) == ["great film"]  # first column by default


def test_file_source_errors(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"sample": "x", "reward": "high"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: reward 'high' is not a number"):
        file_source(str(tmp_path / "bad.jsonl"))
    (tmp_path / "nan.csv").write_text("text,reward\nx,nan\n")
    with pytest.raises(ValueError, match=r"nan.csv:2: reward is nan"):
        file_source(str(tmp_path / "nan.csv"))
    (tmp_path / "f.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"f.jsonl:1: no field 'text'"):
        file_source(str(tmp_path / "f.jsonl"), field="text")
    (tmp_path / "x.md").write_text("x")
    with pytest.raises(ValueError, match="unsupported file type"):
        file_source(str(tmp_path / "x.md"))
    with pytest.raises(ValueError, match="file not found"):
        file_source(str(tmp_path / "missing.txt"))


def test_micro_batches_split_dicts_and_dataclasses():
    batch = {"input_ids": torch.arange(10).view(5, 2), "label": list("abcde"), "beta": 1.0}
    parts = micro_batches(batch, 2)
    assert [p["input_ids"].shape[0] for p in parts] == [2, 2, 1]
    assert parts[2]["label"] == ["e"] and parts[2]["beta"] == 1.0
    assert torch.equal(torch.cat([p["input_ids"] for p in parts]), batch["input_ids"])
    t = torch.zeros(4, 3)
    rl = PPORLBatch(t, t, t, t, t, t, torch.zeros(4, 6), torch.zeros(4, 6))
    assert [p.query_tensors.shape[0] for p in micro_batches(rl, 3)] == [3, 1]
    loader = [batch, batch]
    assert [len(mbs) for mbs in MiniBatchIterator(loader, mb_size=2, num_mb=2)] == [2, 2]
    with pytest.raises(ValueError, match="minibatch_size: must be > 0"):
        micro_batches(batch, 0)
