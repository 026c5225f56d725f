"""Preference pairs and logged rows: sources (JSONL, Parquet, HF datasets; plain or chat),
one-line errors naming the row and the field, and the stores' token layout."""

import json
import math

import pytest
import torch
from transformers import ByT5Tokenizer

from rlkit_core.errors import ConfigError
from rlkit_methods.data.preference_rows import logged_completions, preference_pairs
from rlkit_methods.logged.store import make_logged_store
from rlkit_methods.preferences.store import make_pair_store, pairs_of

TOK = ByT5Tokenizer()  # bytes + 3: pad 0, eos 1, no BOS
CHAT = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")


def ids(text):
    return [b + 3 for b in text.encode()]


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def jsonl(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_pairs_from_jsonl_plain_with_a_margin(tmp_path):
    path = jsonl(tmp_path, [{"prompt": "Q", "chosen": "good", "rejected": "bad", "margin": 2},
                            {"prompt": "R", "chosen": "yes", "rejected": "no"}])
    assert preference_pairs(path) == [{"prompt": "Q", "chosen": "good", "rejected": "bad", "margin": 2.0},
                                      {"prompt": "R", "chosen": "yes", "rejected": "no"}]


def test_pairs_from_parquet_chat_formatted_with_an_implicit_prompt(tmp_path):
    datasets = pytest.importorskip("datasets")
    user = {"role": "user", "content": "hi"}
    rows = [{"chosen": [user, {"role": "assistant", "content": "hello"}],
             "rejected": [user, {"role": "assistant", "content": "go"}]}]
    path = tmp_path / "pairs.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    (pair,) = preference_pairs(str(path))
    assert pair == {"prompt": [user], "chosen": [{"role": "assistant", "content": "hello"}],
                    "rejected": [{"role": "assistant", "content": "go"}]}
    tok = ByT5Tokenizer()
    tok.chat_template = CHAT
    store = make_pair_store([pair], tok, 64)
    assert store[0]["prompt"] == ids("<user>hi<assistant>")
    assert store[0]["chosen"] == ids("hello") and store[0]["rejected"] == ids("go")  # the template adds no end of turn


@pytest.mark.parametrize("row,message", [
    ({"prompt": "Q", "chosen": "a"}, r"rows.jsonl:1: no 'rejected' \(found prompt, chosen\)"),
    ({"prompt": "Q", "chosen": "", "rejected": "b"}, r"rows.jsonl:1: 'chosen' is empty"),
    ({"prompt": "Q", "chosen": "a", "rejected": 3}, r"rows.jsonl:1: 'rejected' must be a string or a list of \{role, content\} messages"),
    ({"prompt": "Q", "chosen": "a", "rejected": "b", "margin": "x"}, r"rows.jsonl:1: 'margin' is 'x', not a number"),
])
def test_bad_pairs_are_one_line_naming_row_and_field(tmp_path, row, message):
    with pytest.raises(ConfigError, match=message) as info:
        preference_pairs(jsonl(tmp_path, [row]))
    assert "\n" not in str(info.value)


def test_logged_rows_from_jsonl_and_a_saved_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"prompt": "a", "completion": "bc", "reward": 1.0, "behaviour_logprobs": [-0.5, -0.25, -0.1]},
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "d"}], "reward": 0.0}]
    items = logged_completions(jsonl(tmp_path, rows[:1]))
    assert items == [{"sample": {"prompt": "a", "completion": "bc", "behaviour_logprobs": [-0.5, -0.25, -0.1]}, "reward": 1.0}]
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(rows[1:]).save_to_disk(str(folder))
    (item,) = logged_completions(str(folder))
    assert item == {"sample": {"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": "d"}]},
                    "reward": 0.0}


@pytest.mark.parametrize("row,message", [
    ({"prompt": "a", "completion": "", "reward": 1}, r"rows.jsonl:1: 'completion' is empty"),
    ({"prompt": "a", "completion": "b", "reward": float("nan")}, r"rows.jsonl:1: reward is nan; rewards must be finite"),
    ({"prompt": "a", "completion": "b"}, r"rows.jsonl:1: no 'reward'; every logged row needs its reward"),
    ({"prompt": "a", "completion": "b", "reward": 1, "behaviour_logprobs": [0.5]},
     r"rows.jsonl:1: 'behaviour_logprobs' holds a positive value; give log-probs"),
    ({"prompt": "a", "completion": "b", "reward": 1, "behaviour_logprobs": [None]},
     r"rows.jsonl:1: 'behaviour_logprobs' is None, not a number"),
])
def test_bad_logged_rows_are_one_line_naming_row_and_field(tmp_path, row, message):
    with pytest.raises(ConfigError, match=message):
        logged_completions(jsonl(tmp_path, [row]))


def test_behaviour_logprobs_for_all_rows_or_none(tmp_path):
    rows = [{"prompt": "a", "completion": "b", "reward": 1, "behaviour_logprobs": [-1.0, -1.0]},
            {"prompt": "a", "completion": "c", "reward": 0}]
    with pytest.raises(ConfigError, match="1 of 2 rows have 'behaviour_logprobs'; give them for all rows or none"):
        logged_completions(jsonl(tmp_path, rows))


def test_behaviour_logprobs_whose_length_does_not_match_the_tokens():
    # "bc" is 2 bytes + EOS = 3 tokens
    sample = {"prompt": "a", "completion": "bc", "behaviour_logprobs": [-0.1, -0.2]}
    with pytest.raises(ValueError, match=r"samples\[0\]: behaviour_logprobs has 2 entries for the completion's 3 tokens"):
        make_logged_store([sample], [1.0], TOK, 32)


def test_pair_store_collates_chosen_then_rejected_rows():
    store = make_pair_store([("ab", "c", "dddd"), {"prompt": "x", "chosen": "yy", "rejected": "z", "margin": 1.5}], TOK, 32)
    assert store[0] == {"prompt": ids("ab"), "chosen": ids("c") + [1], "rejected": ids("dddd") + [1]}
    batch = store.collate([store[0], store[1]])
    # rows: chosen 0, rejected 0, chosen 1, rejected 1; prompts left-padded, completions right-padded
    assert batch["query_tensors"].tolist() == [ids("ab"), ids("ab"), [0] + ids("x"), [0] + ids("x")]
    assert batch["response_tensors"].tolist() == [ids("c") + [1, 0, 0, 0], ids("dddd") + [1],
                                                  ids("yy") + [1, 0, 0], ids("z") + [1, 0, 0, 0]]
    assert batch["response_mask"].sum(-1).tolist() == [2, 5, 3, 2]
    assert batch["position_ids"][2].tolist()[:3] == [0, 0, 1]  # positions follow the real tokens
    assert batch["margin"].tolist() == [0.0, 0.0, 1.5, 1.5]
    chosen, rejected = pairs_of(batch["response_mask"].sum(-1))
    assert chosen.tolist() == [2, 3] and rejected.tolist() == [5, 2]
    with pytest.raises(ValueError, match="a micro-batch of 3 rows holds half a pair"):
        pairs_of(torch.zeros(3))


def test_pair_store_truncates_keeping_the_completion_start_and_the_prompt_end():
    store = make_pair_store([("abcdef", "ghij", "k")], TOK, 6)
    item = store[0]
    assert item["chosen"] == ids("ghij") + [1] and item["prompt"] == ids("f")  # 1 + 5 tokens
    assert len(item["prompt"]) + len(item["rejected"]) <= 6


def test_pair_store_errors_name_the_sample():
    with pytest.raises(ValueError, match=r"samples\[1\]: no 'rejected'"):
        make_pair_store([("a", "b", "c"), {"prompt": "a", "chosen": "b"}], TOK, 32)


def test_logged_store_advantages_over_the_completions_of_each_prompt():
    samples = [["p", "a"], ["p", "b"], ["q", "c"], ["p", "d"]]
    store, stats = make_logged_store(samples, [1.0, 2.0, 5.0, 3.0], TOK, 32, advantage="rloo")
    assert [it["advantage"] for it in store.items] == [1.0 - 2.5, 0.0, 0.0, 3.0 - 1.5]
    assert stats == {"data/rows": 4.0, "data/prompts": 2.0, "data/single_prompts": 1.0}
    grpo, _ = make_logged_store(samples, [1.0, 2.0, 5.0, 3.0], TOK, 32, advantage="grpo")
    assert [round(it["advantage"], 3) for it in grpo.items] == [-1.0, 0.0, 0.0, 1.0]


def test_logged_store_collates_behaviour_logprobs_beside_the_response():
    samples = [{"prompt": "p", "completion": "a", "behaviour_logprobs": [-0.5, -0.1]},
               {"prompt": "p", "completion": "bc", "behaviour_logprobs": [-1.0, -2.0, -0.3]}]
    store, _ = make_logged_store(samples, [0.0, 1.0], TOK, 32)
    batch = store.collate(store.items)
    assert torch.equal(batch["behaviour_logprobs"], torch.tensor([[-0.5, -0.1, 0.0], [-1.0, -2.0, -0.3]]))
    assert batch["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert not math.isnan(batch["advantages"].sum().item())
