"""Round 3, silent wrong results: a resumed run is the run it says it is, the Python API
refuses what it would ignore, config values with no meaning are refused."""

from __future__ import annotations

from pathlib import Path

from r3_common import ILQL, PPO, SFT, check, raises, refuse, validate, write


def saved_checkpoint(tmp: Path, config: str, *sets: str) -> Path:
    """A checkpoint folder holding the config.yml a run of ``config`` saves."""
    from rlkit_core import load_config

    ckpt = tmp / f"run{abs(hash(sets)) % 10**6}" / "checkpoint_4"
    ckpt.mkdir(parents=True, exist_ok=True)
    load_config(config, list(sets)).save_yaml(ckpt / "config.yml")
    return ckpt


def resume_check(ckpt: Path, config: str, sets: list[str]):
    from rlkit_core import load_config
    from rlkit_methods.run.resume import check_resume_config

    return lambda: check_resume_config(ckpt, load_config(config, sets))


def not_ignored(fn, expect: str):
    """An API call that must refuse ``expect``: any other outcome means it was ignored."""

    def probe():
        outcome, detail = raises(fn, expect)()
        return ("silent-wrong", f"ignored ({detail[:150]})") if outcome == "unclear" else (outcome, detail)

    return probe


def cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    # --- resume: the config against the checkpoint's ------------------------------------------
    ckpt = saved_checkpoint(tmp, SFT)
    for key, expect in [
        ("optimizer.kwargs.lr=0.1", "optimizer.kwargs.lr"), ("scheduler.name=linear", "scheduler.name"),
        ("scheduler.kwargs.eta_min=0.1", "scheduler.kwargs.eta_min"), ("optimizer.kwargs.betas=[0.5, 0.9]", "optimizer.kwargs.betas"),
        ("optimizer.kwargs.weight_decay=0.5", "optimizer.kwargs.weight_decay"), ("optimizer.name=sgd", "optimizer.name"),
        ("tokenizer.tokenizer_path=byt5", "tokenizer.tokenizer_path"), ("train.seq_length=12", "train.seq_length"),
        ("model.model_path=some/model", "model.model_path"), ("train.max_grad_norm=1.0", "train.max_grad_norm"),
        ("train.minibatch_size=50", "train.minibatch_size"), ("tokenizer.truncation_side=left", "tokenizer.truncation_side"),
    ]:
        add(f"resume with {key}", not_ignored(resume_check(ckpt, SFT, [key]), expect))
    for key in ["train.total_steps=1000", "train.eval_interval=7", "train.checkpoint_interval=3", "train.checkpoint_dir=elsewhere",
                "train.logging_dir=logs2", "train.tracker=tensorboard", "train.resume_from_checkpoint=x"]:
        add(f"resume with {key} (allowed)", check(resume_check(ckpt, SFT, [key])))
    add("resume with lr changed and the switch set", check(resume_check(ckpt, SFT, ["optimizer.kwargs.lr=0.1", "train.resume_config_changes=allow"])))
    no_config = tmp / "noconfig" / "checkpoint_4"
    no_config.mkdir(parents=True)
    add("resume from a checkpoint without config.yml", not_ignored(resume_check(no_config, SFT, ["train.batch_size=8"]), "config.yml"))

    # --- the Python API ---------------------------------------------------------------------
    from rlkit_core import load_config, train

    def cfg(config, *sets):
        cfg.n = getattr(cfg, "n", 0) + 1  # a folder each: one that trained must not refuse the next
        return load_config(config, [f"train.checkpoint_dir={tmp / f'api-never-{cfg.n}'}", *sets])

    def reward(**kw):
        return [1.0] * len(kw["samples"])

    api = [
        ("PPO train() with samples", lambda: train(reward_fn=reward, prompts=["a", "b"], samples=["ab"], config=cfg(PPO)), "samples"),
        ("ILQL train() with prompts", lambda: train(samples=["ab", "cd"], rewards=[1.0, 0.0], prompts=["a"], config=cfg(ILQL)), "prompts"),
        ("SFT train() with prompts", lambda: train(samples=["ab", "cd"], prompts=["a"], config=cfg(SFT)), "prompts"),
        ("PPO train() with rewards", lambda: train(reward_fn=reward, prompts=["a"], rewards=[1.0], config=cfg(PPO)), "rewards"),
        ("prompts a str", lambda: train(reward_fn=reward, prompts="abcdefgh", config=cfg(PPO)), "prompts"),
        ("stop_sequences a str", lambda: train(reward_fn=reward, prompts=["a"], stop_sequences="ab", config=cfg(PPO)), "stop_sequences"),
        ("eval_prompts a str", lambda: train(reward_fn=reward, prompts=["a"], eval_prompts="abcdef", config=cfg(PPO)), "eval_prompts"),
        ("SFT eval_prompts a str", lambda: train(samples=["ab"], eval_prompts="abc", config=cfg(SFT)), "eval_prompts"),
        ("samples a str", lambda: train(samples="abcdef", config=cfg(SFT)), "samples"),
        ("rewards a str", lambda: train(samples=["ab", "cd", "ef"], rewards="123", config=cfg(ILQL)), "rewards"),
        ("prompts all empty", lambda: train(reward_fn=reward, prompts=["", "", ""], config=cfg(PPO)), "prompts"),
        ("prompts holding None", lambda: train(reward_fn=reward, prompts=["a", None], config=cfg(PPO)), "prompts[1]"),
        ("stop_sequences with ''", lambda: train(reward_fn=reward, prompts=["a"], stop_sequences=[""], config=cfg(PPO)), "stop_sequences"),
        ("stop_sequences holding a number", lambda: train(reward_fn=reward, prompts=["a"], stop_sequences=[3], config=cfg(PPO)), "stop_sequences"),
        ("eval_prompts empty", lambda: train(reward_fn=reward, prompts=["a"], eval_prompts=[], config=cfg(PPO)), "eval_prompts"),
        ("reward_fn not callable", lambda: train(reward_fn="score", prompts=["a"], config=cfg(PPO)), "reward_fn"),
        ("metric_fn not callable", lambda: train(samples=["ab"], metric_fn=3, config=cfg(SFT)), "metric_fn"),
    ]
    for name, fn, expect in api:
        add(name, not_ignored(fn, expect))

    import torch

    from rlkit_methods.common.validate import check_scores

    add("reward fn returns an (n, 1) tensor", not_ignored(lambda: check_scores(torch.ones(3, 1), 3), "(3, 1)"))
    add("reward fn returns an (n, 1) numpy array", not_ignored(lambda: check_scores(torch.ones(3, 1).numpy(), 3), "(3, 1)"))
    add("reward fn returns an (n,) tensor", check(lambda: None if check_scores(torch.ones(3), 3) == [1.0] * 3 else ("silent-wrong", "")))

    def token_scores(scores, lengths, expect):
        def fn():
            from rlkit_methods.common import validate

            checker = getattr(validate, "check_token_scores", None)
            if checker is None:
                raise AssertionError("per-token scores are cut to the response without a word")
            checker(scores, lengths)
        return not_ignored(fn, expect)

    add("per-token scores longer than the response", token_scores([[1.0, 2.0, 3.0], [1.0]], [2, 1], "score 0"))
    add("per-token scores as long as the response", check(lambda: __import__("rlkit_methods.common.validate", fromlist=["x"]).check_token_scores([[1.0, 2.0]], [2])))

    def system_exit(code):
        def probe():
            from rlkit_methods.common.scoring import call_scorer

            def fn(**kw):
                raise SystemExit(code)
            try:
                call_scorer(fn, "reward", 3, ["a"], ["a"], [""], {}, None)
            except SystemExit:
                return "silent-wrong", f"SystemExit({code}) ends the run with exit {code or 0}"
            except Exception as exc:  # noqa: BLE001
                return ("clear" if "exit" in str(exc) and "step 3" in str(exc) else "unclear"), str(exc)[:160]
            return "silent-wrong", "accepted"
        return probe

    add("reward fn raises SystemExit(0)", system_exit(0))
    add("reward fn raises SystemExit(None)", system_exit(None))

    def tokenizes_to_nothing(samples):
        def fn():
            from rlkit_methods.data.tokenizers import randomwalks_tokenizer
            from rlkit_methods.sft.store import make_sft_experience

            make_sft_experience(samples, randomwalks_tokenizer())
        return not_ignored(fn, "tokenizes to no tokens")

    add("SFT samples that tokenize to nothing", tokenizes_to_nothing(["zzz", "ab"]))
    add("SFT dialogue whose output tokenizes to nothing", tokenizes_to_nothing([["a", "zzz"]]))
    add("SFT samples the tokenizer knows", check(lambda: __import__("rlkit_methods.sft.store", fromlist=["x"]).make_sft_experience(
        ["ab", ["a", "bc"]], __import__("rlkit_methods.data.tokenizers", fromlist=["x"]).randomwalks_tokenizer()) and None))

    # --- config values ---------------------------------------------------------------------
    samples_file = write(tmp / "samples.txt", "ab\ncd\nef\n")
    for config, key, expect in [
        (PPO, "method.gen_kwargs.top_p=2", "top_p"), (PPO, "method.gen_kwargs.top_p=-0.5", "top_p"), (PPO, "method.gen_kwargs.top_k=-1", "top_k"),
        (PPO, "method.gen_kwargs.temperature=-1", "temperature"), (PPO, "method.gen_kwargs.num_beams=0", "num_beams"),
        (PPO, "method.gen_kwargs.repetition_penalty=0", "repetition_penalty"), (PPO, "method.gen_experience_kwargs={max_new_tokens: 2, top_p: 3}", "top_p"),
        (SFT, "train.checkpoint_dir=''", "train.checkpoint_dir"), (SFT, "train.logging_dir=''", "train.logging_dir"),
        (PPO, "train.rollout_logging_dir=''", "train.rollout_logging_dir"),
        (SFT, ("data.samples.pipeline=null", f"data.samples.path={samples_file}", "data.samples.kwargs.limit=-1"), "limit"),
        (SFT, ("data.samples.pipeline=null", f"data.samples.path={samples_file}", "data.samples.kwargs.limit=0"), "limit"),
        (SFT, ("data.samples.pipeline=null", f"data.samples.path={samples_file}", "data.samples.kwargs.limit=1.5"), "limit"),
        (SFT, "train.seq_length=1", "seq_length"),
    ]:
        keys = key if isinstance(key, tuple) else (key,)
        add(f"value {keys[-1][:60]}", refuse(validate(config, *keys), expect))
    return probes
