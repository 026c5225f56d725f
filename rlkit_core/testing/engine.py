"""The engine conformance kit: checks any engine (``rlkit_core.engine.Engine``) through the
runs a user makes, so a backend plugin's tests can call the same checks rlkit's engines pass.

Each check takes a *run function* the caller provides, ``run(method, folder, overrides=None,
plugins=(), **train_kwargs) -> trainer``, which trains ``method`` (``"ppo"``, ``"ilql"``,
``"sft"``, or a plugin's) on the engine under test for a few steps with checkpoints in
``folder/ckpts`` and returns the trainer. Every check asserts; none times anything.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Callable

from rlkit_core.engine import Engine
from rlkit_core.testing.fakes import RecordingObserver

Run = Callable[..., Any]
HOOK_ARGUMENTS = {
    "rlkit_train_start": {"config"},
    "rlkit_rollouts_made": {"step", "num_rollouts", "stats"},
    "rlkit_step_end": {"step", "metrics"},
    "rlkit_evaluation_end": {"step", "metrics", "samples"},
    "rlkit_checkpoint_saved": {"step", "path"},
    "rlkit_train_end": {"error"},
}


def check_engine_protocol(engine: Any) -> None:
    """Every member of :class:`Engine`, with the documented parameters."""
    assert isinstance(engine, Engine), f"{type(engine).__name__} lacks members of rlkit_core.engine.Engine"
    for name, spec in vars(Engine).items():
        if name.startswith("_") or not callable(spec):
            continue
        wanted = [p for p in inspect.signature(spec).parameters if p != "self"]
        have = inspect.signature(getattr(engine, name)).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in have.values())
        missing = [p for p in wanted if p not in have and not (takes_any and p not in ("args",))]
        assert not missing, f"{type(engine).__name__}.{name} lacks parameters {missing}"


def read_records(folder: Path) -> list[dict[str, Any]]:
    path = Path(folder) / "ckpts" / "logs" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_lifecycle(run: Run, method: str, folder: Path, *, steps: int = 4, loss_key: str) -> list[tuple[str, dict]]:
    """Hooks with their documented arguments, in order; evaluation samples are dicts; the
    metrics file holds the documented names; checkpoints are complete with ``config.yml``."""
    observer = RecordingObserver()
    run(method, folder, overrides=dict(train=dict(total_steps=steps, eval_interval=steps // 2,
                                                  checkpoint_interval=steps // 2)), plugins=[observer])
    names = observer.names()
    # online methods make their first rollouts while train() sets up the data, before train_start
    assert [n for n in names if n != "rlkit_rollouts_made"][0] == "rlkit_train_start", names
    assert names[-1] == "rlkit_train_end", names
    assert names.count("rlkit_step_end") == steps, names
    assert names.count("rlkit_checkpoint_saved") == 2 and names.count("rlkit_evaluation_end") == 3, names
    for name, kwargs in observer.calls:
        assert HOOK_ARGUMENTS[name] <= set(kwargs), (name, sorted(kwargs))
    assert [kw["step"] for n, kw in observer.calls if n == "rlkit_step_end"] == list(range(1, steps + 1))
    assert observer.calls[-1][1]["error"] is None
    for name, kwargs in observer.calls:
        if name == "rlkit_evaluation_end":
            assert kwargs["samples"] and all(isinstance(s, dict) and {"prompt", "output"} <= set(s) for s in kwargs["samples"])
            assert all(isinstance(v, (int, float)) for v in kwargs["metrics"].values())
        if name == "rlkit_checkpoint_saved":
            check_checkpoint(kwargs["path"])
    records = read_records(folder)
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, steps + 1))
    assert all(loss_key in r for r in train), (loss_key, sorted(train[0]))
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, steps // 2, steps]
    assert all(any(k.startswith(("reward/", "metrics/")) for k in r) for r in evals), evals[0]
    return observer.calls


def check_checkpoint(path) -> None:
    path = Path(path)
    assert (path / "COMPLETE").is_file(), f"{path}: no COMPLETE marker"
    assert (path / "config.yml").is_file(), f"{path}: no config.yml"
    assert any(path.glob("loop_state_*.pt")), f"{path}: no loop state"
    assert not any(p.name.startswith(".tmp-") for p in path.parent.iterdir()), "a temporary folder was left behind"


def exported_tensors(folder) -> dict[str, Any]:
    """Every tensor in the safetensors files of an export folder."""
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        tensors.update({f"{file.name}:{k}": v for k, v in load_file(file).items()})
    assert tensors, f"{folder}: no safetensors files"
    return tensors


def check_exact_resume(run: Run, method: str, folder: Path, *, steps: int = 4, loss_key: str) -> None:
    """``steps`` straight == ``steps / 2``, then a resume for the rest: the same losses and
    bit-identical weights at the end (the optimizer and RNG state included in the checkpoint)."""
    import torch

    half = steps // 2
    common = dict(eval_interval=1000, checkpoint_interval=half, total_steps=steps)
    run(method, folder / "straight", overrides=dict(train=common))
    run(method, folder / "split", overrides=dict(train=dict(common, total_steps=half)))
    resume = str(folder / "split" / "ckpts" / f"checkpoint_{half}")
    run(method, folder / "split", overrides=dict(train=dict(common, resume_from_checkpoint=resume)))
    losses = {name: [r[loss_key] for r in read_records(folder / name) if r["kind"] == "train"] for name in ("straight", "split")}
    assert losses["straight"] == losses["split"], losses
    a = exported_tensors(folder / "straight" / "ckpts" / f"checkpoint_{steps}" / "hf_model")
    b = exported_tensors(folder / "split" / "ckpts" / f"checkpoint_{steps}" / "hf_model")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def check_export_generates(trainer: Any, folder: Path, prompts: list[str], *, max_new_tokens: int = 6) -> None:
    """The HF export loads in plain transformers and greedy-generates what the trainer does."""
    import torch
    from transformers import AutoModelForCausalLM

    trainer.save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = trainer.tokenizer
    batch = tok(prompts, return_tensors="pt", padding=True)
    greedy = dict(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    ours = trainer.engine.generate(batch["input_ids"], batch["attention_mask"], **greedy)
    with torch.no_grad():
        theirs = model.generate(**batch, **greedy)
    n = min(ours.shape[1], theirs.shape[1])
    assert torch.equal(ours[:, :n], theirs[:, :n]), (ours, theirs)


def check_stop_sequences(trainer: Any, stop: str) -> None:
    """``decode`` cuts every output at the first stop sequence."""
    samples, prompts, outputs = trainer.decode([[1]], [[1] + trainer.tokenizer.encode(f"ab{stop}cd", add_special_tokens=False)])
    assert stop not in outputs[0] and "cd" not in outputs[0], outputs


def check_raising_reward(run: Run, folder: Path) -> None:
    """A reward function that raises fails the run with its name and the step."""
    import pytest

    from rlkit_core.errors import RlkitError

    def broken_reward(samples, **kwargs):
        raise ValueError("boom")

    with pytest.raises(RlkitError, match=r"reward function .*broken_reward failed at step 0: ValueError: boom"):
        run("ppo", folder, reward_fn=broken_reward)
