"""``engine_kit.split_microbatches`` by a token budget (``train.minibatch_tokens``) and by an
agreed number of micro-batches; ``real_tokens`` of a collated batch."""

import pytest
import torch

from rlkit_methods.engine_kit import real_tokens, split_microbatches


def test_rows_as_before():
    assert split_microbatches(list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert split_microbatches(list("abc"), None) == [["a", "b", "c"]]


def test_items_fill_a_budget_in_order_and_a_long_item_is_alone():
    items, tokens = list("abcdef"), [3, 4, 9, 12, 1, 2]
    # 3+4 fit 10; 9 alone (9+12 > 10); 12 is over the budget: its own micro-batch; 1+2 together
    assert split_microbatches(items, None, tokens=tokens, minibatch_tokens=10) == [["a", "b"], ["c"], ["d"], ["e", "f"]]
    assert split_microbatches(items, 2, tokens=tokens, minibatch_tokens=100) == [items]  # the budget replaces the rows


def test_an_agreed_count_halves_the_largest_micro_batches():
    items, tokens = list("abcdef"), [1, 1, 1, 1, 5, 5]
    micro = split_microbatches(items, None, tokens=tokens, minibatch_tokens=4, count=4)
    assert micro == [["a", "b"], ["c", "d"], ["e"], ["f"]]  # [a b c d] [e] [f]: the one of several items halved
    assert [x for mb in micro for x in mb] == items
    assert split_microbatches(list("abcde"), 5, count=3) == [["a", "b"], ["c"], ["d", "e"]]  # the largest first
    assert len(split_microbatches(list("abc"), None, count=3)) == 3


def test_bad_arguments_say_what_is_missing():
    with pytest.raises(ValueError, match="minibatch_tokens needs one token count per item"):
        split_microbatches(list("ab"), None, minibatch_tokens=4)
    with pytest.raises(ValueError, match="3 micro-batches asked of 2 items"):
        split_microbatches(list("ab"), None, count=3)


def test_real_tokens_counts_the_masks():
    batch = {"attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]), "decoder_attention_mask": torch.tensor([[1, 0], [1, 1]])}
    assert real_tokens(batch) == 8
    assert real_tokens({"attention_mask": torch.tensor([[1, 0]])}) == 1
