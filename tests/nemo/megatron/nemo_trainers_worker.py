"""torchrun worker (2 CPU processes, gloo): the engine conformance checks of
rlkit_core.testing.engine on the NeMo trainers at one parallel layout, through rlkit_core.train
on the tiny randomwalks set-up (nemo_walks.py). Writes OUT/<layout>_<rank>.json with each
check's outcome ("ok" or the error) and what the layouts' own tests compare across ranks.
Usage: torchrun --nproc_per_node 2 nemo_trainers_worker.py OUT tp2|dp2|pp2"""

import hashlib
import json
import sys
import traceback
from datetime import timedelta
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from rlkit_core.testing.engine import check_exact_resume, check_export_generates, check_lifecycle  # noqa: E402
from rlkit_core.testing.fakes import RecordingObserver  # noqa: E402

import nemo_walks  # noqa: E402
from nemo_walks import LOSS_KEY  # noqa: E402

LAYOUTS = {"tp2": dict(tp=2), "dp2": dict(global_batch=8, micro_batch=2), "pp2": dict(pp=2)}
METHODS = {"tp2": ("ppo", "ilql", "sft"), "dp2": ("ppo", "ilql", "sft"), "pp2": ("ppo", "ilql", "sft")}


def runner(layout):
    def run(method, folder, overrides=None, plugins=(), **train_kwargs):
        trainer = nemo_walks.run(method, folder, layout=layout, config_overrides=overrides, plugins=list(plugins), **train_kwargs)
        trainer.engine.barrier()  # the main process's last metrics line is written before anyone reads it
        return trainer
    return run


def weights_digest(module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        if isinstance(tensor, torch.Tensor):
            digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def attempt(results, name, fn):
    try:
        results[name] = fn() or "ok"
    except Exception:  # recorded, so the test shows what failed on which rank
        results[name] = "FAILED: " + traceback.format_exc()[-3000:]


def main(out: Path, name: str):
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank()
    layout, run = LAYOUTS[name], runner(LAYOUTS[name])
    results = {}
    for method in METHODS[name]:
        folder = out / name / method
        attempt(results, f"{method}/lifecycle", lambda: check_lifecycle(run, method, folder / "lifecycle", loss_key=LOSS_KEY[method]) and None)
        attempt(results, f"{method}/exact_resume", lambda: check_exact_resume(run, method, folder / "resume", loss_key=LOSS_KEY[method]))

        def facts():
            observer = RecordingObserver()
            trainer = run(method, folder / "facts", overrides=dict(train=dict(total_steps=2)), plugins=[observer])
            engine = trainer.engine
            facts = {
                "losses": [kw["metrics"][LOSS_KEY[method]] for n, kw in observer.calls if n == "rlkit_step_end"],
                "weights": weights_digest(engine.module),
                "process_index": engine.process_index, "num_processes": engine.num_processes,
                "tp_rank": engine.ps.get_tensor_model_parallel_rank(), "pp_rank": engine.ps.get_pipeline_model_parallel_rank(),
                "batch_sizes": list(engine.batch_sizes()),
            }
            if method == "ppo":
                facts["rollouts"] = [e.response_tensor.tolist() for e in trainer.store.history]
                facts["has_value_head"] = engine.module.heads is not None
            if method == "ilql":
                facts["target_q_sync"] = engine.module.heads is not None
            if method in ("ppo", "sft") and name == "tp2":
                check_export_generates(trainer, folder / "export", ["a", "bcd"])
                facts["export_generates"] = "ok"
            return facts

        attempt(results, f"{method}/facts", facts)
    (out / f"{name}_{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
