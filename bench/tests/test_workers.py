"""The rlkit workers end to end on a tiny model (a 4-block Llama and the ByT5 byte tokenizer,
no files from a hub): they must keep running through the trainers' own API as it changes.
The TRL worker needs the peer's environment and is not run here."""

import json

import pytest

import run


@pytest.mark.slow  # three worker processes, each importing torch and transformers
def test_rlkit_sides_run_and_report_their_phases(tiny_model, tmp_path):
    out = tmp_path / "bench.json"
    code = run.main(["--cases", "ppo,generate,ilql", "--no-peer", "--repeats", "1", "--model", str(tiny_model),
                     "--batch", "2", "--new-tokens", "4", "--ppo-epochs", "2",
                     "--walks-set", "train.epochs=1", "--walks-set", "train.total_steps=2",
                     "--json", str(out), "--results-dir", str(tmp_path / "runs")])
    report = json.loads(out.read_text())
    errors = {side: r["error"] for case in report["cases"].values() for side, runs in case["runs"].items() for r in runs if r["error"]}
    assert code == 0 and not errors, errors

    ppo = {side: runs[0]["result"] for side, runs in report["cases"]["ppo"]["runs"].items()}
    for result in ppo.values():
        assert result["optimizer_steps"] == 2  # 2 PPO epochs of one minibatch
        assert {"rollout/generate", "rollout/reference", "train/backward", "train/optimizer"} <= set(result["phases"])
        assert result["step_s"] == pytest.approx(sum(result["phases"].values()))
        assert result["peak_rss_after"]["train"] >= result["peak_rss_after"]["load"] > 0
    assert ppo["rlkit unfrozen=2"]["trainable_params"] < ppo["rlkit unfrozen=-1"]["trainable_params"]

    generate = report["cases"]["generate"]["runs"]["rlkit rollout generate"][0]["result"]
    assert generate["new_tokens"] == 4 and generate["prompt_shape"][0] == 2 and generate["tokens_per_s"] > 0
    ilql = report["cases"]["ilql"]["runs"]["rlkit ILQL"][0]["result"]
    assert ilql["steps"] == 2 and ilql["samples_per_s"] > 0 and ilql["vocab_size"] == 23
    assert ilql["evaluations"] >= 1 and 0 <= ilql["post/optimality@beta=1"] <= 1
    assert report["spec"]["model"] == str(tiny_model)


def test_model_folder_rebuilds_the_architecture_with_seeded_weights(tiny_model, tmp_path):
    from safetensors.torch import load_file

    import model_folder

    copied = model_folder.skeleton(tiny_model, tmp_path / "skeleton")
    assert "config.json" in copied and not (tmp_path / "skeleton" / "model.safetensors").exists()
    model_folder.init(tmp_path / "skeleton", tmp_path / "a", seed=3)
    model_folder.init(tmp_path / "skeleton", tmp_path / "b", seed=3)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    original = load_file(tiny_model / "model.safetensors")
    assert a.keys() == original.keys() and all(a[k].shape == original[k].shape for k in a)
    assert all((a[k] == b[k]).all() for k in a)  # the same seed, the same weights on every machine
    assert any((a[k] != original[k]).any() for k in a)
    with pytest.raises(SystemExit, match="has no config.json"):
        model_folder.init(tmp_path / "nothing", tmp_path / "c")
