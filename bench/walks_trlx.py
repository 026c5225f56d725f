"""Bench worker, trlX 0.7 side of the randomwalks cases: trlX's own example code path
(``trlx.train`` with the samples, rewards, prompts and metric of trlX's
``examples/randomwalks``), at the settings of rlkit's example YAML (see ``walks.py``),
evaluation timed apart, then 1000 post-training samples.

    bench/.venv-trlx/bin/python bench/walks_trlx.py --spec spec.json --out result.json --variant ilql|sft|walks-ppo

Runs in the peer's venv with the trlX checkout (``spec.walks.trlx_src``) and the bench's
stand-ins (``bench/standins``: see ``trlx_peer.py``) on ``sys.path``.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from harness import read_spec, setup_torch, worker_args, write_result
from walks import (METHODS, EvalClock, apply_overrides, example_config, fingerprint, optimality_figures,
                   post_training_prompts, result, task_seed, trlx_config)

BENCH = Path(__file__).resolve().parent


def build_tokenizer(vocab: list[str], eos: str, pad: str, folder: str) -> str:
    """The randomwalks tokenizer from its vocabulary (id order), saved for trlX's
    ``AutoTokenizer.from_pretrained``: one token per letter, no merges, joined without spaces."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.BPE({token: i for i, token in enumerate(vocab)}, [], dropout=None))
    model.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, bos_token=eos, eos_token=eos, pad_token=pad)
    tokenizer.save_pretrained(folder)
    return folder


def model_from_config(model_config: dict, seed: int, folder: str) -> str:
    """A folder holding the model built from ``model_config`` with the run's seed.

    trlX 0.7 accepts a config object as ``model_path`` (its ILQL example passes
    ``GPT2Config(...)``) but then crashes at the first forward
    (``AutoModelForCausalLMWithILQLHeads`` has no ``forward_kwargs``: they are set only on the
    ``from_pretrained`` path), so the example as written does not run; the same freshly
    initialised model, saved, goes through the path that works."""
    import transformers
    from transformers import AutoModelForCausalLM

    settings = dict(model_config)
    config = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
    transformers.set_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def as_pytorch_bin(folder: str, out: str) -> str:
    """The same weights re-saved as ``pytorch_model.bin``: trlX 0.7's ``from_pretrained`` (value
    and ILQL heads) reads that file and, when it is missing, asks the hub for it, so a local
    safetensors-only folder (what rlkit and transformers save) fails to load."""
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(folder).save_pretrained(out, safe_serialization=False)
    return out


def section_fields(method_name: str) -> dict[str, set[str]]:
    from trlx.data import configs
    from trlx.data.method_configs import get_method

    names = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
    return {"train": names(configs.TrainConfig), "model": names(configs.ModelConfig),
            "tokenizer": names(configs.TokenizerConfig), "optimizer": names(configs.OptimizerConfig),
            "scheduler": names(configs.SchedulerConfig), "method": names(get_method(method_name))}


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    case = args.variant
    if case not in METHODS:
        raise SystemExit(f"walks_trlx: --variant must be one of {', '.join(METHODS)}, got {case!r}")
    walks_spec = spec["walks"]
    sys.path[:0] = [str(BENCH / "standins"), walks_spec["trlx_src"]]
    torch, _, _ = setup_torch(spec)

    import transformers
    import trlx
    from examples.randomwalks import generate_random_walks  # trlX's own task generator
    from trlx.data.configs import TRLConfig
    from trlx.trainer.accelerate_base_trainer import AccelerateRLTrainer
    from trlx.utils.loading import get_pipeline

    workdir = tempfile.mkdtemp(prefix="trlx-bench-walks-")
    overrides = {**walks_spec["overrides"].get(case, {}), "train.checkpoint_dir": workdir + "/ckpts"}
    raw = apply_overrides(example_config(case), overrides)
    tokenizer_folder = build_tokenizer(walks_spec["vocab"], walks_spec["eos"], walks_spec["pad"], workdir + "/tokenizer")
    config_dict, dropped = trlx_config(raw, section_fields(raw["method"]["name"]), tokenizer_folder)
    model_path = config_dict["model"]["model_path"]
    if isinstance(model_path, dict):  # a model built from a config, as trlX's ILQL example passes GPT2Config(...)
        config_dict["model"]["model_path"] = model_from_config(model_path, raw["train"].get("seed", 1000), workdir + "/init")
    elif Path(model_path).is_dir() and not (Path(model_path) / "pytorch_model.bin").exists():
        config_dict["model"]["model_path"] = as_pytorch_bin(model_path, workdir + "/start")
    config = TRLConfig.from_dict(config_dict)

    # trlX's example passes train.seed here; the bench's task seed keeps the graph apart from it
    metric_fn, start_letters, walks, _ = generate_random_walks(seed=task_seed(walks_spec))
    metric = lambda samples, **kwargs: metric_fn(samples)  # noqa: E731  (trlX's examples' wrapper)
    pairs = [[walk[:1], walk[1:]] for walk in walks]  # trlX's ILQL example: (start, rest of the walk)
    clock = EvalClock()
    clock.wrap_class(AccelerateRLTrainer)
    wall, cpu = time.perf_counter(), time.process_time()
    clock.start()
    if case == "ilql":
        rewards = metric_fn(walks)["optimality"]
        trainer = trlx.train(samples=pairs, rewards=rewards, eval_prompts=start_letters, metric_fn=metric,
                             config=config, stop_sequences=["|"])
    elif case == "sft":
        trainer = trlx.train(samples=pairs, eval_prompts=start_letters, metric_fn=metric, config=config)
    else:
        trainer = trlx.train(reward_fn=lambda samples, **kwargs: metric_fn(samples)["optimality"], prompts=start_letters,
                             eval_prompts=start_letters, metric_fn=metric, config=config)
    train_wall, train_cpu = time.perf_counter() - wall, time.process_time() - cpu
    during_training = copy.deepcopy(clock)  # the post-training evaluate below is not the run's

    max_prompt_length = config.train.seq_length - config.method.gen_kwargs["max_new_tokens"]
    pipeline = get_pipeline(config.train.pipeline)(post_training_prompts(start_letters), max_prompt_length,
                                                   trainer.tokenizer, add_special_tokens=False)
    trainer.add_eval_pipeline(pipeline)
    # trlX's trainers build their eval loader once, in prepare_learning: rebuild it for the new prompts
    eval_batch = config.method.chunk_size if case == "walks-ppo" else config.train.batch_size
    trainer.eval_dataloader = trainer.accelerator.prepare_data_loader(pipeline.create_loader(eval_batch))
    figures = optimality_figures(trainer.evaluate())
    tokens = trainer.tokenizer(walks[:50], add_special_tokens=False).input_ids
    write_result(args.out, result(
        train_wall, train_cpu, during_training, trainer.iter_count, config.train.batch_size, figures,
        walks=fingerprint(walks), eval_prompts=fingerprint(start_letters), token_ids=fingerprint(tokens),
        vocab_size=len(trainer.tokenizer), dropped_keys=dropped, torch=torch.__version__,
        transformers=transformers.__version__,
    ))


if __name__ == "__main__":
    main()
