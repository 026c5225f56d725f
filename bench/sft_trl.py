"""Bench worker (peer): TRL 1.16's ``SFTTrainer`` with ``padding_free=True`` over the batches
``bench/sft_vs_trl.py`` wrote.

    bench/.venv-trl-grpo/bin/python bench/sft_trl.py --spec spec.json --out result.json

Runs in the TRL venv (no rlkit there). The dataset is the spec's token ids, already truncated
(``input_ids`` only: TRL neither re-tokenizes nor adds an EOS; its language-modeling loss covers
every token but each row's first, as rlkit's SFT loss on a plain string does), taken in order
(``shuffle_dataset=False`` and ``train_sampling_strategy="sequential"``: the HF Trainer's
default samples at random), ``per_device_train_batch_size`` rows a step, so both sides train
the same batches (each step's token ids go back to the runner, which compares them).
``max_length=None``: TRL refuses a ``max_length`` with padding-free and no packing (the rows
are cut to the spec's length already). ``gradient_checkpointing`` is off (TRL's SFT default
turns it on): rlkit's side keeps its activations too, and it is TRL's fastest step. Each step's
CPU and wall time run from the callback's ``on_step_begin`` to ``on_step_end`` (forward,
backward, clipping, AdamW, the scheduler, TRL's entropy and accuracy metrics); the loss is what
``training_step`` returns.
"""

from __future__ import annotations

import tempfile
import time

from harness import read_spec, setup_torch, worker_args, write_result


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    torch, _, _ = setup_torch(spec)
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    batches = spec["batches"]
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32, attn_implementation=spec["attention"])
    o = spec["optimizer"]
    config = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-sft-bench-"), report_to="none", save_strategy="no",
        logging_strategy="no", disable_tqdm=True, seed=spec["seed"], use_cpu=True, bf16=False,
        gradient_checkpointing=False,  # TRL's SFT default recomputes the forward: off, like rlkit's side
        padding_free=True, max_length=None, shuffle_dataset=False, train_sampling_strategy="sequential",
        dataloader_num_workers=0,
        per_device_train_batch_size=len(batches[0]), gradient_accumulation_steps=1, max_steps=len(batches),
        learning_rate=o["lr"], lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=o["betas"][0], adam_beta2=o["betas"][1], adam_epsilon=o["eps"], weight_decay=o["weight_decay"],
        max_grad_norm=spec["max_grad_norm"],
    )
    rows = [ids for batch in batches for ids in batch]
    trainer = SFTTrainer(model=model, args=config, processing_class=tokenizer,
                         train_dataset=Dataset.from_dict({"input_ids": rows}))

    steps: list[dict] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            steps.append({"cpu": -time.process_time(), "wall": -time.perf_counter()})

        def on_step_end(self, *a, **k):
            steps[-1]["cpu"] += time.process_time()
            steps[-1]["wall"] += time.perf_counter()

    trainer.add_callback(StepClock())
    training_step = trainer.training_step

    def recorded_step(model, inputs, *a, **k):
        loss = training_step(model, inputs, *a, **k)
        steps[-1].update(loss=float(loss), tokens=int(inputs["input_ids"].numel()),
                         rows=int((inputs["position_ids"] == 0).sum()),
                         ids=inputs["input_ids"].flatten().tolist())
        return loss

    trainer.training_step = recorded_step
    trainer.train()
    write_result(args.out, {"steps": steps, "trl": trl.__version__, "torch": torch.__version__,
                            "attention": model.config._attn_implementation, "padding_free": trainer.padding_free})


if __name__ == "__main__":
    main()
