"""bench/walks_floor.py: the batches it times are the model's real inputs, the unpadded variant
holds exactly the real tokens, and the table's ratios are the medians' ratios."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import bare_step
import walks_floor
from bare_step import model_inputs, packed, padding_share
from walks_floor import best_ratio, floor_rows

PAD = 22


def right_padded(lengths, width):
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.arange(1, n + 1) + 5 * row  # ids 1-20: never the pad id
        mask[row, :n] = 1
    return ids, mask


def test_model_inputs_for_each_batch_kind():
    ids, mask = right_padded([3, 2], 4)
    ilql = SimpleNamespace(input_ids=ids, attention_mask=mask, rewards=None)
    assert model_inputs(ilql, PAD)[0] is ids and model_inputs(ilql, PAD)[1] is mask
    sft = {"input_ids": ids, "attention_mask": mask, "labels": ids}
    assert model_inputs(sft, PAD)[0] is ids
    # trlX's PPORLBatch: query (left-padded) + response (right-padded); trlX masks by != pad
    query = torch.tensor([[PAD, 5], [6, 7]])
    response = torch.tensor([[8, PAD], [9, 10]])
    trlx_ppo = SimpleNamespace(query_tensors=query, response_tensors=response)
    got_ids, got_mask = model_inputs(trlx_ppo, PAD)
    assert got_ids.tolist() == [[PAD, 5, 8, PAD], [6, 7, 9, 10]]
    assert got_mask.tolist() == [[0, 1, 1, 0], [1, 1, 1, 1]]
    # rlkit's PPOTrainBatch carries its own mask on .rollouts
    own = torch.ones(2, 4, dtype=torch.long)
    rlkit_ppo = SimpleNamespace(rollouts=SimpleNamespace(query_tensors=query, response_tensors=response, attention_mask=own))
    assert model_inputs(rlkit_ppo, PAD)[1] is own


def test_padding_share_counts_positions_over_all_batches():
    _, a = right_padded([4, 2], 4)  # 2 of 8 padding
    _, b = right_padded([1], 2)  # 1 of 2
    assert padding_share([a, b]) == pytest.approx(3 / 10)
    assert padding_share([]) == 0.0


def test_packed_rows_hold_only_real_tokens_in_order():
    ids, mask = right_padded([3, 2, 4], 4)  # 9 real tokens -> 2 full rows of 4
    rows = packed(ids, mask)
    real = ids[mask.bool()].tolist()
    assert rows.shape == (2, 4)
    assert rows.flatten().tolist() == real[:8] and PAD not in rows.flatten().tolist()


def run(variants: dict[str, float], padding=0.2, version="x"):
    return {"variants": {v: {"min_ms": ms * 0.9, "median_ms": ms, "n": 10} for v, ms in variants.items()},
            "padding_share": padding, "transformers": version}


def test_rows_and_best_ratio_from_medians():
    rlkit = {"side step": 200.0, "bare step": 220.0, "bare, fused GELU": 180.0, "bare, fused GELU, no mask": 178.0,
             "bare, fused GELU, unpadded": 140.0, "matmuls only": 120.0}
    trlx = {"side step": 240.0, "bare step": 210.0, "bare, fused GELU": 185.0, "bare, fused GELU, no mask": 184.0,
            "bare, fused GELU, unpadded": 150.0, "matmuls only": 118.0}
    rows = floor_rows("ilql", {"rlkit": [run(rlkit), run({k: v + 20 for k, v in rlkit.items()})], "trlx": [run(trlx)]})
    by = {(r["side"], r["variant"]): r for r in rows}
    assert by[("rlkit", "side step")]["median_ms"] == pytest.approx(210.0)  # median of the workers' medians
    assert by[("rlkit", "side step")]["min_ms"] == pytest.approx(180.0)  # min over every worker
    assert by[("trlx", "bare step")]["share_of_side_step"] == pytest.approx(210 / 240)
    # trlX's step over rlkit's cheapest padded bare step (fused GELU here: median of 180 and 200)
    assert best_ratio(rows) == pytest.approx(240 / 190)
    assert best_ratio([r for r in rows if r["side"] == "rlkit"]) is None


def test_matmuls_cover_every_linear_layer_at_its_shape():
    model = bare_step.bare_model({"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 2, "vocab_size": 23}, 0)
    run = bare_step.linear_matmuls(model)
    # per block: attention in (16 -> 48) and out (16 -> 16), MLP up (16 -> 64) and down (64 -> 16); the LM head
    assert sorted(run.shapes) == sorted([(16, 48), (16, 16), (16, 64), (64, 16)] * 2 + [(16, 23)])
    run(7)  # runs at any token count


def test_runner_refuses_unknown_cases():
    with pytest.raises(SystemExit):
        walks_floor.runner_main(["--cases", "ilql,nope", "--no-peer"])


@pytest.mark.slow  # one rlkit worker process: builds the ILQL example's trainer and times a few steps
def test_rlkit_worker_times_the_examples_real_batches(tmp_path):
    out = tmp_path / "floor.json"
    code = walks_floor.runner_main(["--cases", "ilql", "--no-peer", "--rounds", "1", "--steps", "1", "--workers", "1",
                                    "--modes", "fp32-padded,bf16-packed", "--walks-set", "train.epochs=1", "--json", str(out),
                                    "--workdir", str(tmp_path / "work")])
    report = json.loads(out.read_text())
    rlkit = report["cases"]["ilql"]["runs"]["rlkit"][0]
    assert code == 0 and rlkit["transformers"].startswith("5.")
    # each mode's side step ran as named: the trainer read back
    assert rlkit["ran"] == {"packing": False, "mixed_precision": "no"}
    assert report["cases"]["ilql"]["runs"]["rlkit bf16-packed"][0]["ran"] == {"packing": True, "mixed_precision": "bf16"}
    assert set(rlkit["variants"]) == set(walks_floor.VARIANTS) and all(v["n"] == 1 for v in rlkit["variants"].values())
    # the ILQL example's batches: 100 walks, right-padded to the longest in the batch (<= 11 tokens)
    assert all(rows == 100 and 2 <= length <= 11 for rows, length in rlkit["shapes"])
    assert 0.05 < rlkit["padding_share"] < 0.5
    assert all(rows < 100 for rows, _ in rlkit["unpadded_shapes"])
    assert all(rows < 100 and length == 11 for rows, length in rlkit["packed_shapes"])  # bins of the longest row


TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 2, "vocab_size": 23, "n_positions": 16,
             "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


@pytest.mark.parametrize("bf16", [False, True])
def test_packed_bare_step_is_the_padded_steps_arithmetic(bf16):
    """The packed floor trains on the same tokens as the padded bare step: the same loss and the
    same gradient (fp32: to rounding; bf16: to bf16's), in bins of the longest row."""
    from rlkit_accelerate.packing import pack_rows

    ids, mask = right_padded([3, 5, 2, 4], 5)
    args = bare_step.packed_inputs(ids, mask, pack_rows, 1 / 96)
    assert args[0].shape == (3, 5) and int(args[2].sum()) == 14 - 4  # one label fewer than tokens per row
    # left-padded (PPO's queries): the same labels; the padded step would also count each row's
    # first token, predicted from a pad position
    shift = [torch.roll(row, int(n)) for row, n in zip(ids, 5 - mask.sum(1))]  # real tokens at the right end
    left = bare_step.packed_inputs(torch.stack(shift), torch.stack([m.flip(0) for m in mask]), pack_rows, 1 / 96)
    assert sorted(left[3].tolist()) == sorted(args[3].tolist())
    steps = {}
    for name in ("padded", "packed"):
        model = bare_step.bare_model(TINY_GPT2, 0)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)  # weights move by the gradient itself
        if name == "padded":
            got = bare_step.bare_step(model, opt, ids, mask, bf16=bf16)
        else:
            got = bare_step.packed_bare_step(model, opt, *args, bf16=bf16)
        steps[name] = (got["loss"], torch.cat([p.detach().flatten() for p in model.parameters()]))
    tol = 2e-2 if bf16 else 1e-4
    assert steps["packed"][0] == pytest.approx(steps["padded"][0], rel=tol)
    assert torch.allclose(steps["packed"][1], steps["padded"][1], atol=tol)


def test_modes_label_rlkit_sides_and_refuse_unknown_ones():
    def error(message):
        raise SystemExit(message)

    assert walks_floor.side_modes("fp32-padded, bf16-packed", error) == {"rlkit": "fp32-padded",
                                                                         "rlkit bf16-packed": "bf16-packed"}
    with pytest.raises(SystemExit, match="--modes: unknown fp16"):
        walks_floor.side_modes("fp32-packed,fp16", error)
