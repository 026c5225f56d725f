"""Bench worker: ILQL training throughput (samples/s) on trlX's random walks, through
``rlkit run``'s path (``train_from_config``) with ``examples/randomwalks/ilql_randomwalks.yml``.

    python bench/ilql_rlkit.py --spec spec.json --out result.json

The clock is the ``rlkit_step_end`` hook: the time between the first and the second-to-last
step ends covers whole optimizer steps only (the last step also checkpoints and evaluates,
the first follows the initial evaluation). TRL 0.29 has no ILQL, so there is no peer.
"""

from __future__ import annotations

import tempfile

from harness import clock, read_spec, setup_torch, sync, worker_args, write_result
from rlkit_core import hookimpl, load_config  # light: no torch at import
from rlkit_core.run import train_from_config


class StepClock:
    def __init__(self, device: str) -> None:
        self.device = device
        self.now = clock(device)
        self.ends: list[float] = []

    @hookimpl
    def rlkit_step_end(self, trainer, step, metrics, is_main_process):
        sync(self.device)  # a GPU step has ended when its kernels have
        self.ends.append(self.now())


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    torch, _, _ = setup_torch(spec)
    steps = int(spec["ilql"]["steps"])
    if steps < 1:
        raise SystemExit(f"ilql_rlkit: ilql.steps must be >= 1, got {steps}")
    workdir = tempfile.mkdtemp(prefix="rlkit-bench-ilql-")
    total = steps + 2
    config = load_config(spec["ilql"]["config"], {
        "train.total_steps": total, "train.eval_interval": 10**9, "train.checkpoint_interval": 10**9,
        "train.checkpoint_dir": workdir, "train.seed": spec["seed"],
    })
    steps_clock = StepClock(spec["device"])
    train_from_config(config, plugins=[steps_clock])  # what `rlkit run` does
    if len(steps_clock.ends) != total:
        raise SystemExit(f"ilql_rlkit: expected {total} step ends, saw {len(steps_clock.ends)}")
    seconds = steps_clock.ends[-2] - steps_clock.ends[0]
    samples = config.train.batch_size * steps
    write_result(args.out, {"samples_per_s": samples / seconds, "seconds": seconds, "steps": steps,
                            "batch_size": config.train.batch_size, "torch": torch.__version__})


if __name__ == "__main__":
    main()
