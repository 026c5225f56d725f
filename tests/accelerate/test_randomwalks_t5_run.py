"""``rlkit run`` trains the T5 randomwalks examples: the ``randomwalks_walks`` source gives
[start letter, rest] pairs (``split_prompt``), the encoder's prompt and the decoder's output."""

from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.run import train_from_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "randomwalks"
TINY = ["train.total_steps=2", "train.batch_size=8", "train.eval_interval=100", "train.checkpoint_interval=100",
        "train.seed=7", "data.eval_prompts.kwargs.repeat=1", "method.gen_kwargs.max_new_tokens=3",
        "model.model_path.d_model=16", "model.model_path.d_ff=32", "model.model_path.num_layers=1"]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sft", "ilql"])
def test_rlkit_run_trains_a_t5_randomwalks_example(method, tmp_path):
    sets = TINY + [f"train.checkpoint_dir={tmp_path}"] + (["method.gen_kwargs.beta=1"] if method == "ilql" else [])
    config = load_config(EXAMPLES / f"{method}_t5_randomwalks.yml", sets)
    trainer = train_from_config(config)
    assert trainer.iter_count == 2
    # the first walk, 'sda': the encoder reads 's' (+ EOS), the decoder learns 'da' (+ EOS)
    first = trainer.store[0]
    decoder_ids = first["labels"] if method == "sft" else first["decoder_input_ids"][1:]
    assert trainer.tokenizer.decode(first["input_ids"], skip_special_tokens=True) == "s"
    assert trainer.tokenizer.decode(decoder_ids, skip_special_tokens=True) == "da"
