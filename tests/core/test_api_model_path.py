"""train(model_path=...) replaces the model, and the tokenizer with it when the config's
tokenizer was the old model's own (trlX's default configs paired them)."""

from rlkit_core import TRLConfig, train
from rlkit_core.testing import config_dict


def reward_fn(samples, **kwargs):
    return [0.0] * len(samples)


def paired(**sections):
    data = config_dict(**sections)
    data["tokenizer"]["tokenizer_path"] = data["model"]["model_path"]  # as the default configs: smollm2-135m twice
    return TRLConfig.from_dict(data)


def test_the_models_own_tokenizer_follows_the_model(fake_host, tmp_path):
    trainer = train(model_path="org/gpt-j", reward_fn=reward_fn, config=paired())
    assert trainer.config.model.model_path == "org/gpt-j" and trainer.config.tokenizer.tokenizer_path == "org/gpt-j"
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    trainer = train(model_path=str(folder), reward_fn=reward_fn, config=paired())
    assert trainer.config.tokenizer.tokenizer_path == str(folder)


def test_a_tokenizer_chosen_apart_from_the_model_or_a_folder_without_one_is_kept(fake_host, tmp_path):
    trainer = train(model_path="org/gpt-j", reward_fn=reward_fn, config=TRLConfig.from_dict(config_dict()))
    assert trainer.config.tokenizer.tokenizer_path == "fake-tokenizer"
    (tmp_path / "weights-only").mkdir()
    trainer = train(model_path=str(tmp_path / "weights-only"), reward_fn=reward_fn, config=paired())
    assert trainer.config.tokenizer.tokenizer_path == "fake-model"
