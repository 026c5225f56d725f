"""The accelerate trainers on a tiny T5 (``model.model_arch_type: seq2seq``): runs and logs, an
export plain ``AutoModelForSeq2SeqLM`` loads and that generates what the trainer generates,
``num_layers_unfrozen: 0`` training no decoder block, LoRA (only adapters and heads change,
adapters disabled == base model, adapter and merged exports), the model-kind errors, and
seq2seq ILQL on two processes."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from rlkit_methods.run.metrics_log import read_metrics
from rlkit_core.errors import ConfigError
from t5_walks_setup import run, t5_config
from walks_setup import TOKENIZER, model_config

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)

GREEDY = dict(max_new_tokens=6, do_sample=False, eos_token_id=TOKENIZER.eos_token_id, pad_token_id=TOKENIZER.pad_token_id)
LORA = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q", "v"], "lora_dropout": 0.0}
LOSS_KEY = {"sft": "loss", "ilql": "losses/loss", "ppo": "losses/total_loss"}


def prompts():
    return TOKENIZER(["b", "cd"], return_tensors="pt", padding=True)  # as the prompt pipeline: EOS appended


def base_weights(seed=7):
    """The base model train() builds: the same config and seed."""
    torch.manual_seed(seed)
    return AutoModelForSeq2SeqLM.from_config(t5_config()).eval()


def decoder_batch():
    batch = prompts()
    response = torch.tensor([[5, 6, 7], [8, 9, 0]])
    r_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    decoder_ids = torch.cat([torch.zeros_like(response[:, :1]), response[:, :-1]], 1)  # [start] + response[:-1]
    decoder_mask = torch.cat([torch.ones_like(r_mask[:, :1]), r_mask[:, :-1]], 1)
    return batch, response, r_mask, decoder_ids, decoder_mask


@pytest.mark.parametrize("method", ["sft", "ilql", "ppo"])
def test_runs_and_the_export_generates_like_the_trainer(method, tmp_path):
    trainer = run(method, tmp_path, config_overrides=dict(train=dict(total_steps=2)))
    records = [r for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"]
    assert [r["step"] for r in records] == [1, 2]
    assert all(torch.isfinite(torch.tensor(r[LOSS_KEY[method]])) for r in records)
    export = tmp_path / "ckpts" / "checkpoint_2" / "hf_model"
    plain, info = AutoModelForSeq2SeqLM.from_pretrained(export, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    batch = prompts()
    ours = trainer.unwrapped_model if method == "sft" else trainer.unwrapped_model.base_model
    ours.eval()
    expected = ours.generate(**batch, **GREEDY)  # [B, 1 + n]: the decoder start token first
    assert torch.equal(plain.eval().generate(**batch, **GREEDY), expected)
    if method != "ilql":  # the trainer returns prompt + the decoder's new tokens
        out = trainer.generate(batch.input_ids, batch.attention_mask, **GREEDY).cpu()
        width = batch.input_ids.shape[1]
        assert torch.equal(out[:, :width], batch.input_ids) and torch.equal(out[:, width:], expected[:, 1:])


def test_sft_loss_falls(tmp_path):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=24)))
    losses = [r["loss"] for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"]
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses


def test_sft_loss_is_transformers_own_seq2seq_loss(tmp_path):
    trainer = run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=1)))
    batch = trainer.store.collate([trainer.store[i] for i in range(8)])  # outputs of different lengths
    assert (batch["labels"] == -100).any()
    trainer.model.eval()
    with torch.no_grad():
        loss, _ = trainer.loss(trainer.engine.forward("tokens", batch), batch)
        expected = trainer.unwrapped_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
    assert torch.allclose(loss, expected)


def test_ppo_with_no_unfrozen_layers_trains_no_decoder_block(tmp_path):
    initial = base_weights().state_dict()
    trainer = run("ppo", tmp_path, config_overrides=dict(model=dict(num_layers_unfrozen=0), train=dict(total_steps=2)))
    policy = trainer.unwrapped_model
    changed = {n for n, v in policy.base_model.state_dict().items() if not torch.equal(v, initial[n])}
    assert changed == {"decoder.final_layer_norm.weight"}, sorted(changed)  # trlX trained every decoder block
    reference = {n for n, p in policy.named_parameters() if p.requires_grad and not n.startswith(("base_model.", "v_head."))}
    assert not reference


def test_ppo_resumes_exactly(tmp_path):
    overrides = dict(total_steps=8, checkpoint_interval=4, eval_interval=100)
    straight = run("ppo", tmp_path / "a", config_overrides=dict(train=overrides))
    checkpoint = tmp_path / "a" / "ckpts" / "checkpoint_4"
    resumed = run("ppo", tmp_path / "b", config_overrides=dict(train=dict(overrides, resume_from_checkpoint=str(checkpoint))))
    losses = [[r["losses/total_loss"] for r in read_metrics(tmp_path / d / "ckpts" / "logs") if r["kind"] == "train"] for d in "ab"]
    assert losses[1] == losses[0][4:] and len(losses[1]) == 4
    for (name, p), q in zip(straight.unwrapped_model.state_dict().items(), resumed.unwrapped_model.state_dict().values()):
        assert torch.equal(p, q), name


def lora(method, tmp_path, total_steps=2):
    return run(method, tmp_path, config_overrides=dict(model=dict(peft_config=LORA), train=dict(total_steps=total_steps)))


@pytest.mark.parametrize("method, heads", [("ppo", ("v_head",)), ("ilql", ("ilql_heads",)), ("sft", ())])
def test_lora_changes_only_adapters_and_heads(method, heads, tmp_path):
    initial = base_weights().state_dict()
    trainer = lora(method, tmp_path)
    changed = []
    for name, value in trainer.unwrapped_model.state_dict().items():
        if "lora_" in name or name.split(".")[0] in heads:
            continue
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "").removeprefix("base_model.")
        assert base_name in initial, name
        if not torch.equal(value, initial[base_name]):
            changed.append(name)
    assert not changed, changed
    trained = [n for n, p in trainer.unwrapped_model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n or n.split(".")[0] in heads for n in trained), trained
    assert any(v.abs().sum() > 0 for n, v in trainer.unwrapped_model.state_dict().items() if "lora_B" in n)


def test_lora_reference_is_the_base_model_and_the_exports_load(tmp_path):
    from peft import PeftModel

    trainer = lora("ppo", tmp_path, total_steps=4)
    policy = trainer.unwrapped_model.eval()
    batch, response, r_mask, decoder_ids, decoder_mask = decoder_batch()
    reference = policy.forward_reference(batch.input_ids, batch.attention_mask, response, r_mask)
    with torch.no_grad():
        base = base_weights()(**batch, decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask).logits
        assert torch.equal(reference, base)
        assert not torch.equal(policy(batch.input_ids, batch.attention_mask, response, r_mask).logits, reference)

    expected = policy.base_model.generate(**batch, **GREEDY)
    adapter = tmp_path / "ckpts" / "checkpoint_4" / "hf_model"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "value_head.safetensors").is_file()
    assert torch.equal(PeftModel.from_pretrained(base_weights(), adapter).eval().generate(**batch, **GREEDY), expected)
    trainer.save_pretrained(tmp_path / "merged", merge_adapters=True)
    merged, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "merged", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert torch.equal(merged.eval().generate(**batch, **GREEDY), expected)


def test_the_model_kind_must_match_model_arch_type(tmp_path):
    import rlkit_core as rlkit
    import t5_walks_setup
    import walks_setup

    seq2seq_with_gpt2 = t5_walks_setup.config("sft", tmp_path)
    seq2seq_with_gpt2.model.model_path = model_config()
    with pytest.raises(ConfigError, match=r"^model.model_arch_type: seq2seq needs an encoder-decoder model .*'gpt2'.*; set model.model_arch_type: causal$"):
        rlkit.train(config=seq2seq_with_gpt2, samples=t5_walks_setup.WALKS)
    causal_with_t5 = walks_setup.config("sft", tmp_path)
    causal_with_t5.model.model_path = t5_config()
    with pytest.raises(ConfigError, match=r"^model.model_arch_type: causal, but 't5' is an encoder-decoder model; set model.model_arch_type: seq2seq$"):
        rlkit.train(config=causal_with_t5, samples=walks_setup.TASK.walks[:8])


def test_a_lora_config_naming_modules_t5_lacks_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"model.peft_config: .*c_attn.*linear layers are named .*\bq\b"):
        run("ilql", tmp_path, config_overrides=dict(model=dict(peft_config=dict(LORA, target_modules=["c_attn"]))))


def free_port() -> int:
    """A port no one listens on now (other test runs on this machine start torchrun too)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_seq2seq_ilql_on_two_processes(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    script = Path(__file__).with_name("t5_ddp_walks.py")
    result = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), str(script), "ilql", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    finals = [torch.load(tmp_path / f"final_{rank}.pt", weights_only=False) for rank in (0, 1)]
    assert finals[0]["steps"] == finals[1]["steps"] == 4
    assert torch.equal(finals[0]["weights"], finals[1]["weights"])  # DDP kept the replicas identical
    metrics = [{k: v for k, v in f["eval"].items() if k.startswith("metrics/")} for f in finals]
    assert metrics[0] == metrics[1] and "metrics/optimality@beta=1" in metrics[0]  # scored once, broadcast
    assert (tmp_path / "ckpts" / "checkpoint_4" / "loop_state_1.pt").is_file()
