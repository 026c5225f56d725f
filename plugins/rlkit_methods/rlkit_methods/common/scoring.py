"""Scoring samples once: every rank's rows gathered, scored on the main process, results sent back.

Reward and metric functions are user code that may be slow, stateful or hold a model of its
own: they run once per sample on the main process, never once per rank. The online trainers
(rollouts) and evaluation share :func:`score_on_main`; an error in a scorer reaches every rank
as one (:func:`on_main`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rlkit_core.errors import RlkitError

# (sample, prompt, output, metadata): one decoded sample and its prompt's extra columns
ScoreRow = tuple[str, str, str, dict[str, Any]]


def call_scorer(fn: Callable, kind: str, step: int, samples, prompts, outputs, metadata, tokenizer):
    """Call a reward or metric function trlX's way; a failure names the function and the step,
    and a slow call says it is still running (:mod:`rlkit_methods.run.heartbeat`)."""
    from rlkit_methods.run.heartbeat import heartbeat

    name = getattr(fn, "__qualname__", type(fn).__name__)
    try:
        with heartbeat(f"{kind} function {name} (step {step})"):
            return fn(samples=samples, prompts=prompts, outputs=outputs, tokenizer=tokenizer, **metadata)
    except SystemExit as exc:  # the run's exit code is rlkit's to give: sys.exit(0) here is no success
        raise RlkitError(f"{kind} function {name} called sys.exit({exc.code!r}) at step {step}; "
                         f"raise an exception instead") from exc
    except Exception as exc:
        raise RlkitError(f"{kind} function {name} failed at step {step}: {type(exc).__name__}: {exc}") from exc


def on_main(engine, compute: Callable[[], Any]) -> Any:
    """``compute()`` on the main process, its result on every rank. An error there reaches
    every rank as one (the others would otherwise wait in the broadcast until it times out)."""
    result, error = None, None
    if engine.is_main_process:
        try:
            result = compute()
        except Exception as exc:  # re-raised below, on every rank
            error = exc
    shared = engine.broadcast_object({"error": str(error)} if error is not None else {"result": result})
    if error is not None:
        raise error
    if "error" in shared:
        raise RlkitError(shared["error"])
    return shared["result"]


def scorer_arguments(rows: Sequence[ScoreRow]) -> tuple[list[str], list[str], list[str], dict[str, list]]:
    """Rows -> trlX's scorer arguments: samples, prompts, outputs and metadata columns."""
    metadata = {k: [row[3][k] for row in rows] for k in (rows[0][3] if rows else {})}
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], metadata


def score_on_main(engine, rows: list[ScoreRow], score: Callable[[list[ScoreRow]], Any], *,
                  gathered: bool = False, mine: bool = True) -> Any:
    """gather -> ``score`` once on the main process -> scatter.

    ``rows`` are this rank's; every rank's are gathered (in rank order) unless ``gathered``
    says each rank already holds all of them (evaluation's rows). ``score(all rows)`` returns
    one entry per row; each rank gets back the entries of its own rows, or every entry with
    ``mine=False`` (and whatever ``score`` returns when ``gathered``)."""
    everything = [rows] if gathered else engine.gather_object(rows)
    result = on_main(engine, lambda: score([row for part in everything for row in part]))
    if gathered or not mine:
        return result
    start = sum(len(part) for part in everything[: engine.process_index])
    return result[start : start + len(rows)]
