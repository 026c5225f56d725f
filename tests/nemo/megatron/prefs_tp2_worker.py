"""torchrun worker (2 CPU processes, gloo): DPO, the reward model and logged_pg (rlkit_methods,
written once) for a few steps on the NeMo engine at TP=2, from the tiny randomwalks set-up of
tests/accelerate/trainers/prefs_setup.py. Writes OUT/prefs_<rank>.json with each case's
losses (or the error) and, for the reward model, its export folder.
Usage: torchrun --nproc_per_node 2 prefs_tp2_worker.py OUT"""

import json
import sys
import traceback
from datetime import timedelta
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "accelerate" / "trainers"))
import nemo_walks  # noqa: E402
import prefs_setup  # noqa: E402

# case -> (method, trainer, model overrides); dpo_hydra: the reference from the engine's frozen
# copy sharing the frozen blocks, not precomputed
CASES = {"dpo": ("dpo", "NeMoDPOTrainer", {}), "dpo_hydra": ("dpo", "NeMoDPOTrainer", {"num_layers_unfrozen": 1}),
         "reward_model": ("reward_model", "NeMoRewardModelTrainer", {}),
         "logged_pg": ("logged_pg", "NeMoLoggedPGTrainer", {})}
STEPS = 3


def main(out: Path):
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank()
    results = {}
    for case, (method, name, model) in CASES.items():
        folder = out / case
        try:
            overrides = dict(train=dict(total_steps=STEPS, trainer=name,
                                        trainer_kwargs=dict(megatron_cfg=nemo_walks.megatron_cfg(tp=2))), model=model)
            trainer = prefs_setup.run(method, folder, config_overrides=overrides)
            trainer.engine.barrier()  # the main process's metrics are written before rank 1 reads them
            records = [json.loads(line) for line in (folder / "ckpts" / "logs" / "metrics.jsonl").read_text().splitlines()]
            results[case] = {"losses": [r["loss"] for r in records if r["kind"] == "train"],
                             "tp_rank": trainer.engine.ps.get_tensor_model_parallel_rank(),
                             "has_reference": trainer.engine.ref is not None,
                             "export": str(folder / "ckpts" / f"checkpoint_{STEPS}" / "hf_model")}
        except Exception:  # recorded, so the test shows what failed on which rank
            results[case] = "FAILED: " + traceback.format_exc()[-3000:]
    (out / f"prefs_{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
