"""How often a finished two-process gloo run aborts at exit, with and without
rlkit_core.process_group's exit handler. Not a test (a race, counted over many runs):

    OMP_NUM_THREADS=1 .venv/bin/python tests/probes/probe_exit_abort.py --runs 40

Each run is ``torchrun --nproc_per_node 2`` of this file in worker mode: accelerate's gloo
group, a few object collectives, and a reference to the group held as a DDP model holds it.
Busy neighbours make the race likelier (the CI machine has two cores); run it beside a load.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

MODES = ("none", "handler")


def worker(mode: str) -> None:
    import torch
    import torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.utils import broadcast_object_list, gather_object

    from rlkit_core.process_group import destroy_at_clean_exit

    accelerator = Accelerator(cpu=True)
    held = dist.group.WORLD  # noqa: F841  (kept, as a DDP model keeps it: destroying then joins no worker)
    if mode == "handler":
        destroy_at_clean_exit()
    for i in range(20):
        gather_object([accelerator.process_index] * 3)
        broadcast_object_list([{"step": i}])
        accelerator.reduce(torch.ones(4), "sum")
        accelerator.wait_for_everyone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs per mode, interleaved")
    args = parser.parse_args()
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    outcomes: Counter = Counter()
    for _ in range(args.runs):
        for mode in MODES:
            result = subprocess.run(
                [torchrun, "--nproc_per_node", "2", "--master_port", str(random.randint(30000, 49999)), __file__, "--worker", mode],
                capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
            aborted = "terminate called without an active exception" in result.stderr
            outcomes[mode, "aborted" if aborted else "failed" if result.returncode else "ok"] += 1
    for mode in MODES:
        print(f"{mode:8s} " + "  ".join(f"{k}: {outcomes[mode, k]}" for k in ("ok", "aborted", "failed")))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    else:
        main()
