"""Cross-engine conformance: the same step, from the same weights, on two engines.

:mod:`rlkit_core.testing.engine` checks each engine against itself (resume, export, hooks).
This module checks one engine against another: the same items, collated and scored by the
same method code, through ``engine.step(kind, items, collate, loss)`` on both, from the same
initial weights with dropout off. What a method computes must not depend on the engine that
runs it (micro-batching, data-parallel layout, where a whitening or a mean is taken), so the
losses and statistics of every step, the model's outputs after the steps and the updated
weights agree up to float error. rlkit checks the NeMo engine against the accelerate engine
this way (``tests/nemo/megatron/test_cross_engine.py``: PPO, ILQL, SFT and GRPO on a tiny
GPT-2 at TP=PP=DP=1, fp32).

Checking a third-party engine against the accelerate engine:

1. Save one tiny HF model with dropout off (``resid_pdrop=embd_pdrop=attn_pdrop=0`` on a
   GPT-2 config) and point both runs' ``model.model_path`` at the folder; give both the same
   config otherwise (optimizer, scheduler, ``train.seed``), with each engine's trainer name.
2. Build each trainer with its data and no training: :func:`prepared_trainer` takes
   ``rlkit.train``'s arguments and returns the trainer ``train`` would have trained, its store
   holding the method's items and its engine the initial weights.
3. Heads a method adds (PPO's value head, ILQL's Q and V heads) start from each engine's own
   random initialisation: copy them from one engine into the other (engines name them their
   own way; the test above maps the accelerate engine's names onto the NeMo engine's).
4. Take the items once, from one trainer's store (``items = [a.store[i] for i in ...]``: for
   online methods the rollouts of one engine, so both steps see the same samples), and call
   :func:`record_steps` on each trainer, then :func:`compare_records`. Give both engines the
   same rows per optimizer step; giving them several micro-batches per step (accelerate's
   ``train.minibatch_size``) is what catches a method whose math depends on how a step is cut.

A record is plain CPU tensors and floats, so the two sides may run in different processes or
virtual environments (``torch.save`` one, ``torch.load`` it beside the other).

Tolerance: in fp32 the two engines' kernels differ in summation order only (a fused QKV,
Megatron's GELU and cross-entropy), so every compared number agrees within ``atol`` (5e-5
absolute by default; 8.7e-6 the largest seen, ILQL, after two AdamW steps at lr 1e-3 on a
2-block GPT-2). A difference in the math (a statistic taken over a micro-batch on one engine
and over the whole step on the other) shows up at 1e-3 or more. Give the step a real gradient
(rewards that differ within a GRPO group, say): a step whose gradient is float noise moves
every weight by a full learning rate under Adam, differently on each engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rlkit_core.plugins import hookimpl

# statistics that measure the machine, not the step
SKIPPED_STATS = ("time/", "cpu/")


class _Prepared(Exception):
    """Raised in place of ``learn``: ``train`` ends there, its hooks told of no finished run."""


class _StopBeforeLearning:
    """Keeps the trainer ``rlkit.train`` made and stops ``train`` where ``learn`` would start."""

    trainer: Any = None

    @hookimpl
    def rlkit_train_start(self, trainer, config, is_main_process):
        self.trainer = trainer

        def stop(*args, **kwargs):
            raise _Prepared

        trainer.learn = stop  # on the instance: the class's loop is untouched


def prepared_trainer(**train_kwargs) -> Any:
    """``rlkit.train(**train_kwargs)`` up to ``learn``: the trainer with its data (offline
    methods' stores filled, online methods' first rollouts made) and the engine's initial
    weights, no evaluation and no step. ``rlkit_train_end`` hooks see an error (the run did
    not finish: no report is written)."""
    from rlkit_core.api import train

    stop = _StopBeforeLearning()
    try:
        train(plugins=[*train_kwargs.pop("plugins", ()), stop], **train_kwargs)
    except _Prepared:
        pass
    else:
        raise AssertionError("rlkit.train returned without calling the trainer's learn")
    trainer = stop.trainer
    del trainer.learn
    # what learn would have released at its end (rlkit_methods' loop: the run folder's lock)
    if getattr(trainer, "run_dir", None) is not None:
        trainer.run_dir.release()
    return trainer


def record_steps(trainer: Any, items: Sequence[Any], *, steps: int = 2, export_to: str | Path | None = None,
                 want: Sequence[str] = ()) -> dict[str, Any]:
    """Run ``steps`` optimizer steps of ``trainer``'s method over ``items`` on its engine and
    record what a second engine must reproduce: ``stats`` (one dict per step, as ``step``
    returned it), ``outputs`` (the forward of ``trainer.forward_kind`` on the collated items
    after the steps, in eval mode) and, with ``export_to``, ``weights`` (every tensor of the
    engine's HF export, by file and name)."""
    import torch

    engine = trainer.engine
    stats = []
    for _ in range(steps):
        out = engine.step(trainer.forward_kind, list(items), trainer.collate, trainer.loss)
        stats.append({k: float(v) for k, v in out.items() if not k.startswith(SKIPPED_STATS)})
    outputs = engine.forward(trainer.forward_kind, trainer.collate(list(items)), want)
    record: dict[str, Any] = {"stats": stats, "outputs": _flat(outputs)}
    if export_to is not None:
        from rlkit_core.testing.engine import exported_tensors

        engine.export(export_to)
        record["weights"] = {k: v.detach().to(torch.float32).clone() for k, v in exported_tensors(export_to).items()}
    return record


def _flat(outputs: dict[str, Any]) -> dict[str, Any]:
    """Tensors of a forward's outputs by name; tuples (ILQL's Q heads) as ``name.i``."""
    import torch

    flat = {}
    for name, value in outputs.items():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                flat[name if len(values) == 1 else f"{name}.{i}"] = v.detach().to(torch.float32).cpu()
    return flat


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """The largest absolute difference between two records, per compared quantity:
    ``stats/<step>/<name>``, ``outputs/<name>`` and ``weights/<file:name>``, over the names
    both hold. The stats and outputs each engine must have (a loss, the forward's outputs)
    are required of both; an engine may add statistics the other lacks."""
    assert len(a["stats"]) == len(b["stats"]), f"{len(a['stats'])} steps against {len(b['stats'])}"
    diffs: dict[str, float] = {}
    for step, (sa, sb) in enumerate(zip(a["stats"], b["stats"]), start=1):
        common = {k for k in sa.keys() & sb.keys() if not k.startswith(SKIPPED_STATS)}
        assert any(k.startswith(("loss", "losses/")) for k in common), f"step {step}: no loss both engines report: {sorted(sa)} / {sorted(sb)}"
        for k in sorted(common):
            diffs[f"stats/{step}/{k}"] = abs(sa[k] - sb[k])
    assert a["outputs"].keys() == b["outputs"].keys(), (sorted(a["outputs"]), sorted(b["outputs"]))
    for k in sorted(a["outputs"]):
        diffs[f"outputs/{k}"] = _max_abs(a["outputs"][k], b["outputs"][k], k)
    if "weights" in a and "weights" in b:
        common = a["weights"].keys() & b["weights"].keys()
        assert common, f"the exports share no tensor names: {sorted(a['weights'])[:4]} / {sorted(b['weights'])[:4]}"
        for k in sorted(common):
            diffs[f"weights/{k}"] = _max_abs(a["weights"][k], b["weights"][k], k)
    return diffs


def _max_abs(x, y, name: str) -> float:
    assert x.shape == y.shape, f"{name}: shape {tuple(x.shape)} against {tuple(y.shape)}"
    return float((x - y).abs().max()) if x.numel() else 0.0


def compare_records(a: dict[str, Any], b: dict[str, Any], *, atol: float = 5e-5) -> dict[str, float]:
    """Assert two records agree within ``atol``; return their :func:`differences` (the caller
    reports the largest). The failure names the quantities beyond it, largest first."""
    diffs = differences(a, b)
    beyond = sorted(((d, k) for k, d in diffs.items() if not d <= atol), reverse=True)
    assert not beyond, f"{len(beyond)} quantities differ by more than {atol:g}: " + ", ".join(f"{k} {d:.3g}" for d, k in beyond[:8])
    return diffs
