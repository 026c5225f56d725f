"""torchrun worker (2 CPU processes, gloo): ILQL through NeMo 2's Lightning ``trainer.fit()``
(fit_ilql) for 2 steps at TP=2 from a tiny HF GPT-2. Writes OUT/lightning_<rank>.json.
Usage: torchrun --nproc_per_node 2 lightning_ilql_worker.py OUT"""

import json
import os
import sys
from importlib.resources import files
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch  # noqa: E402
from nemo_trainers_worker import config, tiny_gpt2  # noqa: E402

from rlkit_methods import default_ilql_config  # noqa: E402
from rlkit_nemo.trainers.lightning_ilql import fit_ilql  # noqa: E402

YAML = str(files("rlkit_nemo") / "configs" / "megatron_tiny_cpu.yaml")


def main(out: Path):
    os.chdir(out)  # NeMoLogger's log dir
    hf = str(out / "hf")
    if int(os.environ["RANK"]) == 0:
        tiny_gpt2(hf)
    else:
        while not (out / "hf" / "config.json").exists():  # no process group before Lightning makes one
            import time

            time.sleep(0.2)
    cfg = config(default_ilql_config, "NeMoILQLTrainer", hf, steps_for_target_q_sync=1)
    trainer, module = fit_ilql(cfg, [["ab", "aa"], ["ba", "bb"]] * 2, [1.0, 0.0] * 2, YAML, pretrained_model=hf)
    from megatron.core import parallel_state as ps
    from safetensors.torch import load_file

    rank, tp_rank = torch.distributed.get_rank(), ps.get_tensor_model_parallel_rank()
    start = load_file(str(out / "hf" / "model.safetensors"))["transformer.wte.weight"].chunk(2)[tp_rank]
    now = module.module.embedding.word_embeddings.weight.detach().cpu()
    result = {
        "global_step": trainer.global_step,
        "losses": [h["losses/loss"] for h in module.history],
        "embedding_change": float((now - start).abs().max()),  # trained, from the HF weights
    }
    (out / f"lightning_{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
