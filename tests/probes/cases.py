"""The probe list of probe_bad_inputs.py: (name, probe) pairs, grouped as a user meets them."""

from __future__ import annotations

import codecs
from pathlib import Path

from probe_bad_inputs import ROOT, accept_cli, refuse_call, refuse_cli

EX = ROOT / "examples" / "randomwalks"
SFT, PPO, ILQL = str(EX / "sft_randomwalks.yml"), str(EX / "ppo_randomwalks.yml"), str(EX / "ilql_randomwalks.yml")


def validate(config: str, *sets: str) -> list[str]:
    return ["config", "validate", config, *[a for s in sets for a in ("--set", s)]]


def build(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    # --- 1. config files ---------------------------------------------------------------------
    def file_with(name: str, content: bytes) -> str:
        path = tmp / name
        path.write_bytes(content)
        return str(path)

    sft_text = Path(SFT).read_text()
    add("file missing", refuse_cli(["config", "validate", str(tmp / "nope.yml")], "config file not found"))
    add("file is a directory", refuse_cli(["config", "validate", str(tmp)], "config file not found"))
    add("file empty", refuse_cli(["config", "validate", file_with("empty.yml", b"")], "expected a mapping of sections"))
    add("file binary", refuse_cli(["config", "validate", file_with("bin.yml", bytes(range(128, 256)))], "bin.yml: not a text file"))
    add("file with NUL bytes", refuse_cli(["config", "validate", file_with("nul.yml", b"train:\x00\n")], "nul.yml: holds NUL bytes"))
    add("file UTF-16 with BOM", accept_cli(["config", "validate", file_with("u16.yml", codecs.BOM_UTF16_LE + sft_text.encode("utf-16-le"))]))
    add("file UTF-8 with BOM", accept_cli(["config", "validate", file_with("u8bom.yml", codecs.BOM_UTF8 + sft_text.encode())]))
    add("file invalid YAML", refuse_cli(["config", "validate", file_with("bad.yml", b"train: [1, 2\n")], "invalid YAML"))
    add("file tab indentation", refuse_cli(["config", "validate", file_with("tab.yml", b"train:\n\tseq_length: 3\n")], "invalid YAML"))
    add("file top-level list", refuse_cli(["config", "validate", file_with("list.yml", b"- a\n- b\n")], "got list"))
    add("file top-level scalar", refuse_cli(["config", "validate", file_with("scalar.yml", b"hello\n")], "got str"))
    add("file key given twice", refuse_cli(["config", "validate", file_with("dup.yml", (sft_text + "\ntrain:\n  seed: 1\n").encode())], "appears twice"))
    add("file lr given twice", refuse_cli(["config", "validate", file_with("duplr.yml", sft_text.replace("lr: 3.0e-4,", "lr: 3.0e-4, lr: 1.0,").encode())], "appears twice"))
    add("file section missing", refuse_cli(["config", "validate", file_with("nomethod.yml", sft_text.split("method:")[0].encode())], "method: required key missing"))
    add("file method name missing", refuse_cli(validate(SFT, "method.name=null"), "method.name"))
    add("file method unknown", refuse_cli(validate(SFT, "method.name=DPOConfig"), "unknown method"))

    # --- 2. misspelled keys ------------------------------------------------------------------
    for config, key in [
        (SFT, "train.total_step=5"), (SFT, "train.batchsize=5"), (SFT, "train.seq_len=5"), (SFT, "train.checkpointdir=x"),
        (SFT, "train.epoch=2"), (SFT, "train.resume_from=x"), (SFT, "train.overwrite=true"), (SFT, "model.model_pth=x"),
        (SFT, "model.num_layer_unfrozen=1"), (SFT, "tokenizer.tokenizer_pth=x"), (SFT, "tokenizer.padding=left"),
        (SFT, "optimizer.kwarg={}"), (SFT, "scheduler.kwarg={}"), (SFT, "method.gen_kwarg={}"), (PPO, "method.ppo_epoch=2"),
        (PPO, "method.cliprange_valu=0.2"), (PPO, "method.init_kl_coeff=0.1"), (PPO, "method.gama=0.9"), (ILQL, "method.tau_=0.5"),
        (ILQL, "method.two_q=true"), (SFT, "trian.seed=1"), (SFT, "modle.model_path=x"), (SFT, "data.sample=x.txt"),
        (PPO, "reward.nam=vader"), (SFT, "metric.funtion=x:y"), (SFT, "train.trackr=wandb"),
    ]:
        add(f"typo {key.split('=')[0]} ({Path(config).stem})", refuse_cli(validate(config, key), "unknown key"))

    # --- 3. values with no meaning -------------------------------------------------------------
    for config, key, expect in [
        (SFT, "train.total_steps=0", "must be > 0"), (SFT, "train.total_steps=-1", "must be > 0"),
        (SFT, "train.total_steps=abc", "expected an integer"), (SFT, "train.total_steps=1.5", "expected an integer"),
        (SFT, "train.total_steps=true", "expected an integer"), (SFT, "train.batch_size=0", "must be > 0"),
        (SFT, "train.batch_size=-4", "must be > 0"), (SFT, "train.seq_length=0", "must be > 0"), (SFT, "train.epochs=0", "must be > 0"),
        (SFT, "train.checkpoint_interval=0", "must be > 0"), (SFT, "train.eval_interval=-1", "must be > 0"),
        (SFT, "train.minibatch_size=0", "must be > 0"), (SFT, "train.tracker=mlflow", "train.tracker"),
        (SFT, "train.seed=abc", "expected an integer"), (SFT, "train.max_grad_norm=-1", "must be > 0"),
        (SFT, "train.save_best=maybe", "expected true or false"), (SFT, "model.model_arch_type=decoder", "model_arch_type"),
        (SFT, "model.num_layers_unfrozen=-2", "num_layers_unfrozen"), (SFT, "tokenizer.padding_side=middle", "padding_side"),
        (SFT, "tokenizer.truncation_side=top", "truncation_side"), (SFT, "optimizer.name=adamm", "optimizer"),
        (SFT, "scheduler.name=cosine", "scheduler"), (PPO, "method.num_rollouts=0", "num_rollouts"), (PPO, "method.chunk_size=0", "chunk_size"),
        (PPO, "method.ppo_epochs=0", "ppo_epochs"), (PPO, "method.gamma=1.5", "gamma"), (PPO, "method.lam=2", "lam"),
        (PPO, "method.cliprange=-1", "cliprange"), (PPO, "method.vf_coef=-1", "vf_coef"), (PPO, "method.init_kl_coef=-1", "init_kl_coef"),
        (PPO, "method.horizon=0", "horizon"), (ILQL, "method.tau=1.5", "tau"), (ILQL, "method.gamma=-1", "gamma"),
        (ILQL, "method.steps_for_target_q_sync=0", "steps_for_target_q_sync"), (ILQL, "method.alpha=2", "alpha"),
        (SFT, "train.batch_size=1000000000", "fit no device"), (SFT, "train.minibatch_size=200", "larger than train.batch_size"),
        (SFT, "train.seq_length=1000000000", "fit no device"),
    ]:
        add(f"value {key} ({Path(config).stem})", refuse_cli(validate(config, key), expect))

    # --- 4. --set syntax -------------------------------------------------------------------------
    for arg, expect in [("train.batch_size", "="), ("=5", "key"), ("train..seed=1", "seed"), ("train.batch_size=[1", "batch_size"),
                        ("train.batch_size.x=1", "batch_size")]:
        add(f"--set {arg}", refuse_cli(validate(SFT, arg), expect))

    # --- 5. what a run would refuse before loading a model --------------------------------------
    for config, key, expect in [
        (SFT, "method.gen_kwargs.max_new_tokens=-1", "max_new_tokens: must be a whole number > 0"),
        (SFT, "method.gen_kwargs.max_new_tokens=0", "max_new_tokens: must be a whole number > 0"),
        (SFT, "method.gen_kwargs.max_new_tokens=ten", "max_new_tokens: must be a whole number > 0"),
        (SFT, "train.seq_length=9", "leaves no room for prompts"),
        (PPO, "method.gen_kwargs.top_kk=3", "did you mean top_k"), (PPO, "method.gen_kwargs.temprature=0.7", "did you mean temperature"),
        (SFT, "method.gen_kwargs.do_smaple=true", "did you mean do_sample"),
        (PPO, "method.gen_experience_kwargs={max_new_tokens: 4, top_pp: 1.0}", "did you mean top_p"),
        (PPO, "method.gen_experience_kwargs={max_new_tokens: -4}", "gen_experience_kwargs.max_new_tokens"),
        (SFT, "optimizer.kwargs.lr_rate=0.1", "AdamW has no such argument"), (SFT, "optimizer.kwargs.weight_decy=0.1", "did you mean weight_decay"),
        (SFT, "scheduler.kwargs.T_maxx=5", "did you mean T_max"), (SFT, "optimizer.name=sgd", "SGD has no such argument"),
        (SFT, "train.trainer=AcceleratePPOTrainer", "but method.name selects"), (SFT, "train.trainer=NoSuchTrainer", "unknown trainer"),
        (SFT, "train.tracker=wandb", "wandb is not installed"),
        (SFT, "model.model_path.n_layr=2", "did you mean n_layer"), (SFT, "model.model_path.model_type=gtp2", "did you mean gpt2"),
        (SFT, "model.model_path.hiden_size=8", "not a field of GPT2Config"),
        (SFT, "model.model_extra_configs.trust_remote_code=true", "model.trust_remote_code: true"),
        (SFT, "tokenizer.tokenizer_extra_configs.trust_remote_code=true", "model.trust_remote_code: true"),
    ]:
        add(f"preflight {key} ({Path(config).stem})", refuse_cli(validate(config, key), expect))
    add("preflight trust_remote_code at the top warns", accept_cli(
        validate(SFT, "model.trust_remote_code=true"), check=lambda lines: any(line.startswith("warning: model.trust_remote_code") for line in lines)))

    # the same configs handed to the Python API: train() refuses them before building a trainer
    # (before 15bf120 a typo in the inline model trained another model and a huge batch hung)
    from rlkit_core import load_config, train
    from rlkit_core.errors import ConfigError

    for key, expect in [
        ("model.model_path.n_layr=2", "did you mean n_layer"), ("method.gen_kwargs.max_new_tokens=-1", "must be a whole number > 0"),
        ("train.batch_size=100000000", "fit no device"), ("train.minibatch_size=1000", "is larger than train.batch_size"),
        ("method.gen_kwargs.do_smaple=true", "did you mean do_sample"), ("optimizer.kwargs.lr_rate=0.1", "AdamW has no such argument"),
    ]:
        sets = [key, f"train.checkpoint_dir={tmp / 'api-never'}"]
        add(f"train() with {key}", refuse_call(lambda sets=sets: train(samples=["ab"] * 8, config=load_config(SFT, sets)),
                                              expect, errors=(ConfigError,)))

    # --- 6. data, rewards, metrics named in the config -------------------------------------------
    for config, key, expect in [
        (SFT, f"data.samples={{pipeline: null, path: {tmp / 'missing.jsonl'}}}", "not found"), (SFT, "data.samples={pipeline: null, path: data.xlsx}", "a file ending in"),
        (SFT, "data.samples={pipeline: nope}", "unknown pipeline"), (PPO, "reward=nope", "unknown reward"),
        (SFT, "metric=nope", "unknown reward"), (PPO, "reward={name: null, function: no_such_module:score}", "module 'no_such_module' not found"),
        (PPO, "reward={name: null, function: nocolon}", "module:function"), (PPO, "reward={function: a:b}", "give exactly one of name, function"), (PPO, "reward={name: randomwalks, function: a:b}", "exactly one"),
        (SFT, "data.eval_prompts={pipeline: nope}", "unknown pipeline"), (SFT, "train.pipeline=NoPipeline", "unknown pipeline"),
    ]:
        add(f"data {key} ({Path(config).stem})", refuse_cli(validate(config, key), expect))

    from cases_more import more_cases

    probes += more_cases(tmp)
    return probes


