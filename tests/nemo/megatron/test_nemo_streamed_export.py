"""The export streams (rlkit_nemo.streamed_export): a layer at a time into safetensors shards
with transformers' index, which ``from_pretrained`` reloads equal to the unstreamed
conversion, holding about one shard and one layer at once. TP=2 and PP=2:
test_nemo_checkpoint_tp2.py."""

import json

import pytest
import torch

from rlkit_core.engine import ModelSpec
from rlkit_core.errors import ConfigError
from rlkit_nemo.convert import megatron_to_hf
from rlkit_nemo.models.sharding import full_state_dict
from rlkit_nemo.streamed_export import shard_bytes

import nemo_walks

pytestmark = pytest.mark.usefixtures("megatron_cpu")


def engine(tmp_path, heads="lm"):
    from rlkit_nemo.engine import MegatronEngine

    config = nemo_walks.config("sft", tmp_path)
    config.model.model_path = nemo_walks.model_config(n_layer=8, n_embd=64)
    eng = MegatronEngine(config, megatron_cfg=nemo_walks.megatron_cfg(), pretrained_model=config.model.model_path)
    eng.build(ModelSpec(heads=heads))
    return eng


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def test_the_export_streams_into_capped_shards_that_reload_as_the_unstreamed_weights(tmp_path):
    from transformers import AutoModelForCausalLM

    eng = engine(tmp_path)
    unstreamed = megatron_to_hf(full_state_dict(eng.module), eng.hf_config)  # what the export wrote before
    layer = nbytes(v for k, v in unstreamed.items() if k.startswith("transformer.h.0."))
    total = nbytes(unstreamed.values())
    cap = layer + 1024  # one block a shard
    eng.export(tmp_path / "single", nemo=False)  # 1GB: one file, as save_pretrained writes a small model
    assert (tmp_path / "single" / "model.safetensors").is_file()
    eng.export(tmp_path / "single", nemo=False, max_shard_size=cap)  # again, sharded: the single file goes
    folder = tmp_path / "single"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3 and not (folder / "model.safetensors").exists()
    assert all((folder / s).stat().st_size <= cap + 4096 for s in shards)  # + the header
    reloaded = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    assert set(unstreamed) <= set(reloaded)
    assert all(torch.equal(reloaded[k], v) for k, v in unstreamed.items())
    # held at once (instrumented): the pending shard, the layer being converted and its HF copy;
    # never the model (the unstreamed export held it about four times)
    peak = eng.last_export.peak_bytes
    embedding = nbytes([unstreamed["transformer.wte.weight"]])
    assert peak <= cap + 2 * max(layer, embedding + nbytes([unstreamed["transformer.wpe.weight"]])), (peak, cap, layer)
    assert peak < total / 2, (peak, total)


def test_the_heads_file_beside_the_shards(tmp_path):
    from safetensors.torch import load_file

    eng = engine(tmp_path, heads="value")
    eng.export(tmp_path / "out", nemo=False, max_shard_size="20KB")
    heads = load_file(str(tmp_path / "out" / "rlkit_heads.safetensors"))
    want = {k: v for k, v in full_state_dict(eng.module).items() if k.startswith("heads.")}
    assert heads and set(heads) == set(want) and all(torch.equal(heads[k], want[k].contiguous()) for k in want)


@pytest.mark.parametrize("size, want", [(123, 123), ("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1.5KB", 1500)])
def test_shard_sizes(size, want):
    assert shard_bytes(size) == want


def test_a_bad_shard_size_is_one_line():
    with pytest.raises(ConfigError, match=r"^max_shard_size: 'big' is not a size; give bytes or a string such as '500MB'"):
        shard_bytes("big")
