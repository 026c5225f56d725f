"""Bench worker, rlkit side of the randomwalks cases: the example YAML through ``rlkit run``'s
path (``train_from_config``), evaluation timed apart, then 1000 post-training samples.

    python bench/walks_rlkit.py --spec spec.json --out result.json --variant ilql|sft|walks-ppo
"""

from __future__ import annotations

import copy
import os
import tempfile
import time

from harness import read_spec, setup_torch, worker_args, write_result
from walks import (EvalClock, METHODS, apply_overrides, example_config, fingerprint, optimality_figures,
                   post_training_prompts, result, rlkit_task_overrides, task_seed)


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    case = args.variant
    if case not in METHODS:
        raise SystemExit(f"walks_rlkit: --variant must be one of {', '.join(METHODS)}, got {case!r}")
    torch, _, _ = setup_torch(spec)

    from rlkit_core import hookimpl, load_config
    from rlkit_core.api import max_prompt_length
    from rlkit_core.config.overrides import parse_sets
    from rlkit_core.run import train_from_config
    from rlkit_methods.rewards.randomwalks import random_walks
    # imported before the clock, as the trlX worker imports trlx (its trainers, transformers,
    # accelerate) before its clock: both sides' train() then time the run, not module imports
    from rlkit_accelerate.trainers import AccelerateILQLTrainer, AcceleratePPOTrainer, AccelerateSFTTrainer  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401  (trlx's modules import both)

    # run.py --rlkit-set: rlkit's side alone (its recommended settings against trlX's example's)
    overrides = {**spec["walks"]["overrides"].get(case, {}), **parse_sets(spec.get("rlkit_set") or []),
                 "train.checkpoint_dir": tempfile.mkdtemp(prefix="rlkit-bench-walks-")}
    if spec.get("rlkit_mixed_precision"):  # run.py --rlkit-mixed-precision: read by the engine's Accelerator
        os.environ["ACCELERATE_MIXED_PRECISION"] = spec["rlkit_mixed_precision"]
    seed = task_seed(spec["walks"])  # the graph: every randomwalks source, reward and metric on it
    overrides.update(rlkit_task_overrides(apply_overrides(example_config(case), overrides), seed))
    config = load_config(METHODS_PATH(case), overrides)
    clock = EvalClock()

    class TimeEvaluation:
        @hookimpl
        def rlkit_train_start(self, trainer, config, is_main_process):
            clock.wrap_instance(trainer)  # the loop calls self.evaluate(): the instance attribute wins

    wall, cpu = time.perf_counter(), time.process_time()
    clock.start()
    trainer = train_from_config(config, plugins=[TimeEvaluation()])
    train_wall, train_cpu = time.perf_counter() - wall, time.process_time() - cpu
    during_training = copy.deepcopy(clock)  # the post-training evaluate below is not the run's

    task = random_walks(seed=seed)
    pipeline = trainer.eval_pipeline
    prompts = post_training_prompts(task.eval_prompts)
    trainer.add_eval_pipeline(type(pipeline)(prompts, max_prompt_length(config), trainer.tokenizer, add_special_tokens=False))
    figures = optimality_figures(trainer.evaluate())  # not part of the run's figures
    tokens = trainer.tokenizer(task.walks[:50], add_special_tokens=False).input_ids
    write_result(args.out, result(
        train_wall, train_cpu, during_training, trainer.iter_count, config.train.batch_size, figures,
        walks=fingerprint(task.walks), eval_prompts=fingerprint(task.eval_prompts), token_ids=fingerprint(tokens),
        vocab_size=len(trainer.tokenizer), torch=torch.__version__,
        mixed_precision=str(trainer.accelerator.mixed_precision), packing=bool(config.train.packing),
    ))


def METHODS_PATH(case: str) -> str:
    from walks import EXAMPLES

    return str(EXAMPLES / METHODS[case])


if __name__ == "__main__":
    main()
