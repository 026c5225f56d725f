"""Bad user input gives one clear line saying what is wrong and how to fix it."""

import pytest

from rlkit_methods.common.validate import check_rewards, check_samples
from rlkit_methods.ilql.store import make_experience
from rlkit_methods.sft.store import make_sft_experience


def test_samples_and_rewards_of_different_lengths(char_tokenizer):
    with pytest.raises(ValueError, match="rewards: got 1 rewards for 2 samples; give one per sample"):
        make_experience(["ab", "cd"], [1.0], char_tokenizer)


@pytest.mark.parametrize("bad, text", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_nan_or_infinite_reward_names_the_index(char_tokenizer, bad, text):
    with pytest.raises(ValueError, match=rf"rewards\[1\] is {text}; rewards must be finite numbers"):
        make_experience(["ab", "cd", "ef"], [1.0, bad, 0.0], char_tokenizer)


def test_non_number_reward(char_tokenizer):
    with pytest.raises(ValueError, match=r"rewards\[0\] is 'good' \(str\), not a number"):
        make_experience(["ab"], ["good"], char_tokenizer)


@pytest.mark.parametrize("sample", ["", [], ["", ""]])
def test_empty_sample(char_tokenizer, sample):
    with pytest.raises(ValueError, match=r"samples\[1\]: empty sample"):
        make_experience(["ab", sample], [1.0, 2.0], char_tokenizer)
    with pytest.raises(ValueError, match=r"samples\[1\]: empty sample"):
        make_sft_experience(["ab", sample], char_tokenizer)


def test_other_sample_errors():
    with pytest.raises(ValueError, match="samples: the list is empty"):
        check_samples([])
    with pytest.raises(ValueError, match=r"samples\[0\]: a dialogue needs an even number of parts"):
        check_samples([["prompt", "output", "prompt"]])
    with pytest.raises(ValueError, match=r"samples\[0\]: expected a string or a \[prompt, output, ...\] list, got int"):
        check_samples([3])
    with pytest.raises(ValueError, match="rewards: missing"):
        check_rewards(None, 2)


def test_sample_truncated_to_the_budget_warns_and_is_kept(char_tokenizer):
    with pytest.warns(UserWarning, match="truncated to 4"):
        store = make_experience(["abcdefgh", "ab"], [1.0, 0.0], char_tokenizer, max_length=4)
    assert len(store) == 2 and len(store[0].input_ids) == 4
