"""SFT on conversations (TRL's ``{"messages": [...]}``): rendered with the tokenizer's chat
template, the loss on the assistant turns only."""

import pytest

from rlkit_methods.sft.store import make_sft_experience

CHATML = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
TALK = [{"role": "system", "content": "be kind"}, {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "the movie was great"}, {"role": "user", "content": "a terrible film"},
        {"role": "assistant", "content": "hello"}]


@pytest.fixture
def chat_tokenizer(make_tokenizer):
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHATML
    return tokenizer


def learned(tokenizer, item):
    return tokenizer.decode([t for t, label in zip(item["input_ids"].tolist(), item["labels"].tolist()) if label != -100])


def test_the_loss_is_on_the_assistant_turns_of_the_templated_text(chat_tokenizer):
    store = make_sft_experience([{"messages": TALK}, TALK], chat_tokenizer, max_length=256)
    for item in store.history:  # a {"messages": ...} row and a bare list of turns read the same
        text = chat_tokenizer.decode(item["input_ids"].tolist())
        assert text == chat_tokenizer.apply_chat_template(TALK, tokenize=False).rstrip()
        # the turns' end markers are learned (the model learns to stop), the headers are not
        assert learned(chat_tokenizer, item) == "the movie was great</s>hello</s>"


def test_conversations_that_cannot_be_learned_are_named(chat_tokenizer, make_tokenizer):
    with pytest.raises(ValueError, match=r"samples\[1\]: no assistant message"):
        make_sft_experience([TALK, {"messages": TALK[:2]}], chat_tokenizer)
    with pytest.raises(ValueError, match=r"samples\[0\]: every message needs 'role' and 'content'"):
        make_sft_experience([{"messages": [{"role": "user"}]}], chat_tokenizer)
    plain = make_tokenizer()
    plain.chat_template = None
    with pytest.raises(ValueError, match=r"samples\[0\]: a messages sample needs a tokenizer with a chat template"):
        make_sft_experience([TALK], plain)


def test_rlkit_run_hands_conversation_rows_to_the_method_whole():
    from rlkit_core.run import split_samples

    rows = [{"messages": TALK}, {"sample": "plain text"}]
    assert split_samples(rows) == ([{"messages": TALK}, "plain text"], None)
