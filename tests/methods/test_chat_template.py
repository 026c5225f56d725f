"""tokenizer.chat_template: prompts wrapped as a user turn of the chat template, for instruct models."""

import pytest

from rlkit_core.config import TRLConfig
from rlkit_core.errors import ConfigError
from rlkit_core.testing import config_dict
from rlkit_methods.data.prompts import PromptPipeline

CHATML = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def decoded(pipeline, i):
    return pipeline.tokenizer.decode(pipeline[i]["input_ids"])


def test_the_tokenizers_own_template_wraps_each_prompt(make_tokenizer):
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHATML
    prompts = [{"prompt": "the movie", "label": 0}, {"prompt": "a film", "label": 1}]
    pipeline = PromptPipeline(prompts, 64, tokenizer, chat_template=True)
    assert decoded(pipeline, 0) == "<s>user\nthe movie</s>\n<s>assistant\n"
    assert decoded(pipeline, 1) == "<s>user\na film</s>\n<s>assistant\n" and pipeline[1]["label"] == 1
    # the template's special tokens are tokens, not their characters
    assert pipeline[0]["input_ids"][0] == tokenizer.bos_token_id


def test_a_template_string_from_the_config_is_used(make_tokenizer):
    tokenizer = make_tokenizer()
    template = "{% for m in messages %}Q: {{ m['content'] }}{% endfor %}{% if add_generation_prompt %} A:{% endif %}"
    pipeline = PromptPipeline(["hello world"], 64, tokenizer, chat_template=template)
    assert decoded(pipeline, 0) == "Q: hello world A:"


def test_off_leaves_prompts_as_they_are(make_tokenizer):
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHATML
    for off in (None, False):
        assert decoded(PromptPipeline(["the movie"], 64, tokenizer, chat_template=off), 0) == "the movie"


def test_true_without_a_template_names_the_fix(make_tokenizer):
    tokenizer = make_tokenizer()
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="tokenizer.chat_template: true, but the tokenizer .* has no chat template"):
        PromptPipeline(["the movie"], 64, tokenizer, chat_template=True)


def test_the_config_field_takes_true_a_string_or_null(methods_host):
    for value in (True, False, None, CHATML):
        data = config_dict(method="ppo")
        data["tokenizer"]["chat_template"] = value
        assert TRLConfig.from_dict(data).tokenizer.chat_template == value
    data = config_dict(method="ppo")
    data["tokenizer"]["chat_template"] = 3
    with pytest.raises(ConfigError, match="tokenizer.chat_template: must be true, false, null or a Jinja template string"):
        TRLConfig.from_dict(data)


def test_conversational_prompts_end_where_the_assistant_answers(make_tokenizer):
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHATML
    talk = [{"role": "system", "content": "be kind"}, {"role": "user", "content": "hello world"}]
    pipeline = PromptPipeline([{"messages": talk, "label": 1}, {"prompt": "the movie", "label": 0}], 64, tokenizer,
                              chat_template=True)
    assert decoded(pipeline, 0) == "<s>system\nbe kind</s>\n<s>user\nhello world</s>\n<s>assistant\n"
    assert decoded(pipeline, 1) == "<s>user\nthe movie</s>\n<s>assistant\n"  # a plain prompt is a user turn
    assert pipeline[0]["label"] == 1  # other keys of the row reach the reward function
    # without chat_template: true, a conversation is still rendered (it cannot be sent as text)
    pipeline = PromptPipeline([talk], 64, tokenizer)
    assert decoded(pipeline, 0).endswith("<s>assistant\n")
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match=r"prompts\[0\]: a messages prompt needs a chat template"):
        PromptPipeline([talk], 64, tokenizer)
