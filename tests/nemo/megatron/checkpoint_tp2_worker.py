"""torchrun worker (2 CPU processes, gloo, TP=2): weights loaded per rank and written per rank.

Records in ``OUT/ckpt_<rank>.json``:
* ``gpt2``: a GPT-2 whose vocabulary (61) TP=2 cannot split, read lazily from its HF folder
  (vocabulary padded to 62), gathered and converted back: equal to the HF state dict; its logits
  (the real vocabulary) equal HF's;
* ``llama3``: a Llama 3 (rope_theta 500000, llama3 rope scaling, GQA) from its HF folder: the
  round trip is exact and the TP=2 logits equal HF's;
* ``nemo``: that Llama saved in NeMo's layout at TP=2 (``mp_rank_00``, ``mp_rank_01``),
  reloaded at TP=2 (each rank its own file) and at TP=1 (merged): equal to what was saved;
* ``trlx``: trlX's Llama checkpoint layout at TP=2 (megatron_legacy QKV) with trlX's
  megatron_llama_cfg.yaml: logits equal HF's;
* ``pp2``: the Llama 3 loaded at PP=2 (each stage its layers), saved in NeMo's layout (one
  ``tp_rank_00_pp_rank_00X`` per stage, layers numbered within the stage) and reloaded at PP=1
  (stages merged): equal to the staged model, and exported to HF exactly;
* ``streamed``: the GPT-2 and the Llama 3 at TP=2 and the Llama 3 at PP=2 exported a layer at
  a time into shards (``rlkit_nemo.streamed_export``): ``from_pretrained`` of each folder holds
  the unstreamed conversion's weights, and no shard is above its cap unless one layer is.
Usage: torchrun --nproc_per_node 2 checkpoint_tp2_worker.py OUT
"""

import json
import sys
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state as ps  # noqa: E402
from megatron.core import tensor_parallel  # noqa: E402
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed  # noqa: E402

from rlkit_core.engine import ModelSpec  # noqa: E402
from rlkit_nemo.build import build_model, model_source  # noqa: E402
from rlkit_nemo.convert import megatron_to_hf  # noqa: E402
from rlkit_nemo.megatron_config import translate  # noqa: E402
from rlkit_nemo.models.gpt import causal_padding_mask  # noqa: E402
from rlkit_nemo.models.sharding import _tensors, full_state_dict, main_state_dict  # noqa: E402
from rlkit_nemo.nemo_checkpoint import save_nemo  # noqa: E402
from rlkit_nemo.streamed_export import export_hf  # noqa: E402

from nemo_fixtures import trlx_llama_yaml_model, write_trlx_llama  # noqa: E402
from test_megatron_convert import tiny_llama3  # noqa: E402
from test_nemo_checkpoint import tiny_llama  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"


def layout(tp, pp=1):
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    model_parallel_cuda_manual_seed(0)


def load(yaml_model, source, vocab):
    model_cfg, vocab, weights, hf_config = model_source(yaml_model, source, vocab)
    tp = ps.get_tensor_model_parallel_world_size()
    module, _ = build_model(model_cfg, vocab, weights, ModelSpec(heads="lm"), make_heads=None, cpu=True,
                            device=torch.device("cpu"), tp=tp)
    return module.eval(), model_cfg


def logits(model, ids):
    with torch.no_grad():
        out = model(ids, torch.arange(ids.shape[1]).repeat(ids.shape[0], 1), causal_padding_mask(torch.ones_like(ids)))
    return tensor_parallel.gather_from_tensor_model_parallel_region(out)


def tiny_yaml_model(tp):
    model = translate("megatron_tiny_cpu.yaml", cpu=True)["model"]
    model.update(tensor_model_parallel_size=tp)
    return model


def save_hf(hf, folder):
    if dist.get_rank() == 0:
        hf.save_pretrained(folder)
    dist.barrier()


def same(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def streamed(model, hf_config, folder, unstreamed, cap=20_000):
    """``model`` exported a layer at a time into shards of ``cap`` bytes, reloaded by
    transformers on the main process: equal to the unstreamed conversion ``unstreamed``."""
    from transformers import AutoModelForCausalLM

    writer = export_hf(folder, model, hf_config, None, is_main=dist.get_rank() == 0, max_shard_size=cap)
    dist.barrier()
    if dist.get_rank() != 0:
        return {"writer": writer is None}
    reloaded = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    shards = sorted(folder.glob("model-*-of-*.safetensors"))
    return {
        "writer": writer is not None,
        "reload_exact": same({k: v for k, v in reloaded.items() if k in unstreamed}, unstreamed),
        "shards": len(shards), "index": (folder / "model.safetensors.index.json").is_file(),
        "largest_shard_over_cap": max(p.stat().st_size for p in shards) - cap,
        "largest_layer_bytes": max(sum(t.numel() * t.element_size() for k, t in unstreamed.items() if f".{i}." in k)
                                   for i in range(hf_config.num_hidden_layers)),  # GPT-2's n_layer too
    }


def main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = Path(out)
    results = {}
    layout(2)
    ids = torch.randint(0, 61, (2, 40), generator=torch.Generator().manual_seed(1))

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=61, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()
    save_hf(gpt2, out / "hf_gpt2")
    model, _ = load(tiny_yaml_model(2), str(out / "hf_gpt2"), 61)
    original = {k: v for k, v in gpt2.state_dict().items() if not k.endswith(".attn.bias")}
    with torch.no_grad():
        expected = gpt2(input_ids=ids).logits
    got = logits(model, ids)
    results["gpt2"] = {
        "padded_rows_per_rank": model.embedding.word_embeddings.weight.shape[0],
        "round_trip_exact": same(megatron_to_hf(full_state_dict(model), gpt2.config), original),
        "logits_max_diff": float((got[..., :61] - expected).abs().max()),
        "padded_logits_masked": bool((got[..., 61:] == torch.finfo(got.dtype).min).all()),
    }
    results["streamed"] = {"gpt2_tp2": streamed(model, gpt2.config, out / "streamed_gpt2", original)}

    llama = tiny_llama3()
    save_hf(llama, out / "hf_llama3")
    model, model_cfg = load(tiny_yaml_model(2), str(out / "hf_llama3"), 64)
    with torch.no_grad():
        expected = llama(input_ids=ids).logits
    full = full_state_dict(model)
    main = main_state_dict(model, rank == 0)  # the export's gather: the main process alone
    results["llama3"] = {
        "main_gather": same(main, full) if rank == 0 else main is None,
        "round_trip_exact": same(megatron_to_hf(full, llama.config), llama.state_dict()),
        "logits_max_diff": float((logits(model, ids) - expected).abs().max()),
    }
    results["streamed"]["llama3_tp2"] = streamed(model, llama.config, out / "streamed_llama3",
                                                 megatron_to_hf(full, llama.config))

    save_nemo(out / "nemo_tp2", model, model_cfg, ps, is_main=rank == 0)
    dist.barrier()
    mine = {k: v.clone() for k, v in _tensors(model).items()}
    again, _ = load(tiny_yaml_model(2), str(out / "nemo_tp2"), 64)
    results["nemo"] = {
        "files": sorted(str(p.relative_to(out / "nemo_tp2")) for p in (out / "nemo_tp2").rglob("*") if p.is_file()),
        "tp2_reload_exact": same(_tensors(again), mine),
        "tp2_reload_logits_max_diff": float((logits(again, ids) - expected).abs().max()),
    }

    hf = tiny_llama()
    if rank == 0:
        write_trlx_llama(hf, out / "trlx_tp2", tp=2)
    dist.barrier()
    cfg = trlx_llama_yaml_model(hf, FIXTURES / "megatron_llama_cfg.yaml", tp=2)
    trlx, _ = load(translate(cfg, cpu=True)["model"], str(out / "trlx_tp2"), 64)
    with torch.no_grad():
        expected_trlx = hf(input_ids=ids).logits
    results["trlx"] = {"tp2_logits_max_diff": float((logits(trlx, ids) - expected_trlx).abs().max())}

    layout(1, pp=2)
    staged, staged_cfg = load(dict(tiny_yaml_model(1), pipeline_model_parallel_size=2), str(out / "hf_llama3"), 64)
    save_nemo(out / "nemo_pp2", staged, staged_cfg, ps, is_main=rank == 0)
    dist.barrier()
    staged_full = full_state_dict(staged)
    staged_main = main_state_dict(staged, rank == 0)
    results["streamed"]["llama3_pp2"] = streamed(staged, llama.config, out / "streamed_pp2",
                                                 megatron_to_hf(staged_full, llama.config))

    layout(1)  # each rank alone: the TP=2 NeMo checkpoint merged per tensor, the PP=2 one per stage
    merged, _ = load(tiny_yaml_model(1), str(out / "nemo_tp2"), 64)
    results["nemo"]["tp1_merge_exact"] = same(full_state_dict(merged), full)
    unstaged, _ = load(tiny_yaml_model(1), str(out / "nemo_pp2"), 64)
    results["pp2"] = {
        "files": sorted(str(p.relative_to(out / "nemo_pp2")) for p in (out / "nemo_pp2").rglob("*") if p.is_file()),
        "pp1_merge_exact": same(full_state_dict(unstaged), staged_full),
        "main_gather": same(staged_main, staged_full) if rank == 0 else staged_main is None,
        "round_trip_exact": same(megatron_to_hf(staged_full, llama.config), llama.state_dict()),
        "logits_max_diff": float((logits(unstaged, ids) - expected).abs().max()),
    }
    ps.destroy_model_parallel()
    (out / f"ckpt_{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
