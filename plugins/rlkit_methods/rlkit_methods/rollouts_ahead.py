"""Asynchronous rollouts (``train.async_rollouts``): later phases are sampled while this one trains.

The schedule is fixed in advance, so it does not depend on timing. Once phase ``j``'s
rollouts are in the store (its training about to start, the policy at version ``v_j``),
the loop plans the phases up to ``j + max_staleness``: each new job takes its prompt chunks
now, in order, and samples them with the policy ``v_j``. Phase ``q`` therefore trains on
samples of the policy that started phase ``q - s`` (``s <= max_staleness``; s = 1 once the
run is past its first phases). :meth:`RolloutsAhead.take` refuses a job older than the bound.

How the job runs depends on the generator:

* one with its own weights (vLLM, a copy): in a background thread, beside training, after
  taking a snapshot of the weights of ``v_j`` (taken on every rank when the job is made, so
  a sharding engine's gather is collective and the trainer may change its weights at once).
  Its samples are reproducible by seed only if the generator has a random stream of its own:
  an in-process torch sampler shares torch's global one with training;
* one that shares the engine's weights (each engine's default): at once, before the phase
  trains (its weights are the ones being trained). The schedule and the samples are those of
  the overlapped run; nothing overlaps.

A checkpoint waits for the jobs under way and keeps their samples (the generator's log-probs
and versions with them), so a resumed run trains on exactly the rollouts the uninterrupted
run would have, and samples the later phases from the same policies.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from rlkit_core.errors import RlkitError
from rlkit_core.generator import SharedWeightsGenerator, WeightUpdate, named_weights

if TYPE_CHECKING:
    from rlkit_methods.online import Responses


@dataclass
class Job:
    """The sampling of one future phase."""

    phase: int  # the phase it samples for
    policy_phase: int  # the phase whose training started from the policy that samples it
    version: int  # that policy's optimizer steps
    batches: list[dict[str, Any]] = field(default_factory=list)  # its prompt chunks, collated
    update: WeightUpdate | None = None  # the weights of ``version`` (a generator with its own)
    future: Future | None = None
    result: list["Responses"] | None = None
    seconds: float = 0.0  # spent sampling
    tokens: int = 0  # new tokens kept


class RolloutsAhead:
    """The jobs planned ahead of training, oldest first."""

    def __init__(self, trainer: Any, max_staleness: int):
        self.trainer, self.max_staleness = trainer, max_staleness
        # a generator on the engine's weights cannot sample while they train: its jobs run at once
        self.overlap = not isinstance(trainer.generator, SharedWeightsGenerator)
        self.jobs: list[Job] = []
        self.executor: ThreadPoolExecutor | None = None
        self.last: dict[str, float] = {}  # the stats of the last phase taken

    @property
    def running(self) -> bool:
        return any(job.future is not None and not job.future.done() for job in self.jobs)

    def plan(self, phase: int, version: int, chunk: Callable[[], dict[str, Any]], rows: int) -> None:
        """After phase ``phase``'s rollouts are stored: jobs for the phases up to
        ``phase + max_staleness``, each ``rows`` rows of prompt chunks sampled from ``version``."""
        trainer = self.trainer
        while len(self.jobs) < self.max_staleness:
            job = Job(phase=phase + len(self.jobs) + 1, policy_phase=phase, version=version)
            taken = 0
            while taken < rows:
                job.batches.append(chunk())
                taken += int(job.batches[-1]["input_ids"].shape[0])
            if self.overlap:
                snapshot = [(name, tensor.detach().clone())
                            for name, tensor in named_weights(trainer.engine, trainable_only=True)]
                job.update = WeightUpdate(version=version, weights=lambda snapshot=snapshot: iter(snapshot))
                if self.executor is None:
                    self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlkit-rollouts")
                job.future = self.executor.submit(self._sample, job)
            else:
                self._sample(job)
            self.jobs.append(job)

    def _sample(self, job: Job) -> None:
        trainer, start = self.trainer, time.time()
        if job.update is not None:
            trainer.generator.update_weights(job.update)
            job.update = None  # the snapshot's memory goes with it
        kwargs = trainer.experience_kwargs
        job.result = [trainer.sample_responses(batch, sampler=trainer.sample_rollouts, **kwargs) for batch in job.batches]
        job.batches = []
        job.seconds = time.time() - start
        job.tokens = sum(len(o) for part in job.result for o in part.outputs)

    def take(self, phase: int) -> list["Responses"]:
        """Phase ``phase``'s samples (waiting for its job), after checking its staleness."""
        if not self.jobs or self.jobs[0].phase != phase:
            planned = [job.phase for job in self.jobs]
            raise RlkitError(f"train.async_rollouts: no samples planned for rollout phase {phase} (planned: {planned}); "
                             f"the checkpoint or the loop lost them")
        job = self.jobs.pop(0)
        waited = time.time()
        if job.future is not None:
            job.future.result()  # the generator's error, if any, is raised here
        waited = time.time() - waited
        staleness = phase - job.policy_phase
        if not 0 <= staleness <= self.max_staleness:
            raise RlkitError(f"train.async_rollouts: phase {phase}'s samples come from the policy of phase "
                             f"{job.policy_phase}, {staleness} phases old, over train.max_staleness={self.max_staleness}")
        self.last = {"async/staleness": float(staleness),
                     "async/staleness_steps": float(self.trainer.iter_count - job.version),
                     "async/policy_version": float(job.version), "time/rollout_wait": waited,
                     "time/rollout_generate": job.seconds, "tokens_per_second/generate": job.tokens / max(job.seconds, 1e-9)}
        return job.result

    def drain(self) -> None:
        """Wait for every job under way (its samples are kept)."""
        for job in self.jobs:
            if job.future is not None:
                job.future.result()
                job.future = None

    def close(self, *, wait: bool) -> None:
        """Stop the producer: ``wait`` keeps every planned job's samples (a run that ends);
        otherwise jobs not started are dropped (a run that failed)."""
        if self.executor is None:
            return
        if wait:
            self.drain()
        else:
            for job in self.jobs:
                if job.future is not None:
                    job.future.cancel()
        self.executor.shutdown(wait=True)
        self.executor = None
        kept = 0  # the jobs run in order: keep those sampled before the first one dropped or failed
        while kept < len(self.jobs) and self._sampled(self.jobs[kept]):
            kept += 1
        self.jobs = self.jobs[:kept]

    @staticmethod
    def _sampled(job: Job) -> bool:
        future = job.future
        if future is None:
            return job.result is not None
        if future.cancelled() or future.exception() is not None:
            return False
        job.future = None
        return True

    # --- checkpoint state ----------------------------------------------------------------------

    def state(self) -> list[dict[str, Any]]:
        """Every planned job with its samples (waits for those under way)."""
        self.drain()
        return [{"phase": job.phase, "policy_phase": job.policy_phase, "version": job.version, "seconds": job.seconds,
                 "tokens": job.tokens, "result": list(job.result or [])} for job in self.jobs]  # written plain

    def load_state(self, jobs: list[dict[str, Any]]) -> None:
        from rlkit_methods.online import Responses

        self.jobs = [Job(phase=j["phase"], policy_phase=j["policy_phase"], version=j["version"], seconds=j["seconds"],
                         tokens=j["tokens"], result=[part if isinstance(part, Responses) else Responses(**part)
                                                     for part in j["result"]]) for j in jobs]


def refuse_async_rollouts(trainer: Any, config: Any) -> None:
    """A method that cannot learn from rollouts of an older policy refuses the mode in one line
    (its ``on_policy_only`` says why; None: it can), before a model loads."""
    why = getattr(trainer, "on_policy_only", None)
    if config.train.async_rollouts and why:
        from rlkit_core.errors import ConfigError

        raise ConfigError(f"train.async_rollouts: {type(trainer).__name__} cannot learn from rollouts of an older policy "
                          f"({why}); set train.async_rollouts: false")
