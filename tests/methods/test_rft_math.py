"""RFT: trlX's config fields and defaults, and its selection math against hand-computed vectors."""

import numpy as np
import pytest
import yaml

from rlkit_core import TRLConfig
from rlkit_core.errors import ConfigError
from rlkit_methods.rft.config import RFTConfig, default_rft_config
from rlkit_methods.rft.selection import (
    add_generations,
    is_growth_step,
    percentile_at,
    score_thresholds,
    select_samples,
)
from rlkit_methods.rft.store import make_rft_store
from rlkit_methods.sft.store import IGNORE_INDEX

GEN = dict(max_new_tokens=9, top_k=0, top_p=1.0, temperature=1.0, do_sample=True)


# --- config ---------------------------------------------------------------------------


def test_rft_config_has_trlx_fields_and_defaults():
    config = RFTConfig(gen_kwargs=GEN)
    assert (config.name, config.start_percentile, config.end_percentile) == ("RFTConfig", 0.7, 0.95)
    assert (config.n_improve_steps, config.n_generations_per_prompt) == (4, 32)
    assert config.gen_kwargs == GEN


def rft_yaml(tmp_path, **method):
    data = default_rft_config().evolve(model=dict(model_path="gpt2"), tokenizer=dict(tokenizer_path="gpt2")).to_dict()
    data["method"] = {"name": "rftconfig", **method}
    path = tmp_path / "rft.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_rft_is_a_registered_method_read_from_yaml(tmp_path, rlkit_host):
    config = TRLConfig.load_yaml(rft_yaml(tmp_path, gen_kwargs=GEN, n_generations_per_prompt=100, start_percentile=0.9,
                                          end_percentile=0.95, n_improve_steps=1))
    assert isinstance(config.method, RFTConfig)
    assert (config.method.n_generations_per_prompt, config.method.start_percentile) == (100, 0.9)
    assert config.train.trainer == "AccelerateRFTTrainer"


def test_rft_config_errors_name_each_field(tmp_path, rlkit_host):
    with pytest.raises(ConfigError) as info:
        TRLConfig.load_yaml(rft_yaml(tmp_path, start_percentile=1.5, n_improve_steps=0, n_generation_per_prompt=3))
    lines = sorted(str(info.value).splitlines())
    assert lines == [
        "method.gen_kwargs: required key missing",
        "method.n_generation_per_prompt: unknown key; did you mean n_generations_per_prompt?",
        "method.n_improve_steps: must be > 0, got 0",
        "method.start_percentile: must be in [0, 1], got 1.5",
    ]
    with pytest.raises(ConfigError, match=r"method.end_percentile: must be >= start_percentile \(0.9\), got 0.8"):
        TRLConfig.load_yaml(rft_yaml(tmp_path, gen_kwargs=GEN, start_percentile=0.9, end_percentile=0.8))


# --- schedule ---------------------------------------------------------------------------


def test_percentile_rises_linearly_to_end_over_the_improve_steps():
    # start 0.6, end 0.9, n = 3: 0.6, 0.75, 0.9, then the next growth step starts again
    assert [percentile_at(e, 0.6, 0.9, 3) for e in range(5)] == pytest.approx([0.6, 0.75, 0.9, 0.6, 0.75])
    assert [is_growth_step(e, 3) for e in range(5)] == [True, False, False, True, False]
    # n = 1 (trlX's randomwalks and sentiments examples): every epoch is a growth step at start
    assert [percentile_at(e, 0.9, 0.95, 1) for e in range(3)] == [0.9, 0.9, 0.9]
    assert RFTConfig(gen_kwargs=GEN, start_percentile=0.7, end_percentile=0.95, n_improve_steps=2).percentile(1) == 0.95


# --- thresholds and selection ------------------------------------------------------------


def test_thresholds_are_per_prompt_quantiles_clipped_across_prompts():
    # prompt A: [0, 1, 2, 3] at p = 0.5 -> position 1.5 -> 1.5; prompt B: [0, 0, 0, 1] -> 0
    # clip to [0 + 1e-3, 1.5 - 1e-3]: A -> 1.499, B -> 0.001
    assert score_thresholds([[0, 1, 2, 3], [0, 0, 0, 1]], 0.5) == pytest.approx([1.499, 0.001])
    # p = 0.75: A -> position 2.25 -> 2.25, B -> 0.25; clip to [0.251, 2.249]
    assert score_thresholds([[3, 1, 0, 2], [1, 0, 0, 0]], 0.75) == pytest.approx([2.249, 0.251])
    # one prompt (or equal thresholds): the upper clip wins, t - 1e-3, so scores equal to t stay
    assert score_thresholds([[1, 1, 1, 0]], 0.5) == pytest.approx([0.999])


def test_selection_keeps_each_prompts_best_once_in_first_seen_order():
    pool = add_generations({}, ["a", "a", "a", "a", "b", "b", "b", "b", "a"],
                           ["w", "x", "y", "z", "p", "q", "r", "s", "z"], [0, 1, 2, 3, 0, 0, 0, 1, 3])
    selected, thresholds = select_samples(pool, 0.5)
    # a: [0, 1, 2, 3, 3] -> quantile 2.0; b: [0, 0, 0, 1] -> 0.0; clipped to [0.001, 1.999]
    assert thresholds == pytest.approx([1.999, 0.001])
    assert selected == [["a", "y"], ["a", "z"], ["b", "s"]]  # the second ("a", "z") is a duplicate


def test_pool_grows_across_growth_steps_and_rejects_bad_scores():
    pool = add_generations({}, ["a"], ["x"], [0.5])
    add_generations(pool, ["a", "b"], ["y", "z"], np.array([1.0, 0.0]))
    assert pool == {"a": [("x", 0.5), ("y", 1.0)], "b": [("z", 0.0)]}
    with pytest.raises(ValueError, match="reward_fn: scores must be finite numbers, got nan for prompt 'a'"):
        add_generations(pool, ["a"], ["w"], [float("nan")])
    with pytest.raises(ValueError, match="every prompt needs at least one scored sample"):
        score_thresholds([[1.0], []], 0.5)


def test_store_trains_on_the_selected_outputs_only(char_tokenizer):
    store = make_rft_store([["ab", "cd"], ["e", "f"]], char_tokenizer, max_length=16)
    first = store[0]
    prompt_len = len(char_tokenizer("ab", add_special_tokens=False).input_ids)
    assert (first["labels"][:prompt_len] == IGNORE_INDEX).all()
    assert char_tokenizer.decode(first["labels"][prompt_len:]) == "cd</s>"
    with pytest.raises(ValueError, match="RFT selected no samples; lower start_percentile"):
        make_rft_store([], char_tokenizer)
