"""torchrun worker (2 CPU processes, gloo): packed against padded steps on the NeMo engine at
TP=2 and at PP=2 (packing_cases.py). Writes OUT/<layout>_<rank>.json.
Usage: torchrun --nproc_per_node 2 packing_parallel_worker.py OUT"""

import json
import sys
from datetime import timedelta
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch.distributed as dist  # noqa: E402

import packing_cases  # noqa: E402

LAYOUTS = {"tp2": dict(tp=2), "pp2": dict(pp=2)}


def main(out: Path):
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    for name, layout in LAYOUTS.items():
        results = packing_cases.run_cases(out / name, **layout)
        (out / f"{name}_{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
