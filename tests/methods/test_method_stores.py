"""Dialogue tokenization, the ILQL and SFT stores, position ids under left padding."""

import pytest
import torch

from rlkit_methods.data.dialogue import DialogMessage, tokenize_dialogue
from rlkit_methods.ilql.store import make_experience, normalize_rewards
from rlkit_methods.sft.losses import sft_loss
from rlkit_methods.sft.store import make_sft_experience

# ByT5 ids: byte + 3, EOS "</s>" = 1, PAD = 0
A, B, C, D, E, F = (ord(ch) + 3 for ch in "abcdef")
EOS = 1


def test_ilql_two_turn_dialogue_worked_example(char_tokenizer):
    """samples[0] = ["ab", "c", "de", "f"] is tokenized as

        position   0  1  2  3  4  5  6
        token      a  b  c  d  e  f  </s>
        turn       P  P  O  P  P  O  O

    Actions are the positions whose next token is an output: 1 (-> c), 4 (-> f), 5 (-> </s>);
    states add the last position 6 (terminal); dones are 1 except the terminal state.
    Rewards [1, 3] normalise to (r - 2) / std = -1/sqrt(2), +1/sqrt(2), put on the last action.
    """
    store = make_experience([["ab", "c", "de", "f"], ["a", "b"]], [1.0, 3.0], char_tokenizer, max_length=64)
    first = store[0]
    assert first.input_ids.tolist() == [A, B, C, D, E, F, EOS]
    assert first.actions_ixs.tolist() == [1, 4, 5]
    assert first.input_ids[1:][first.actions_ixs].tolist() == [C, F, EOS]
    assert first.states_ixs.tolist() == [1, 4, 5, 6]
    assert first.dones.tolist() == [1, 1, 1, 0]
    torch.testing.assert_close(first.rewards, torch.tensor([0.0, 0.0, -(2**-0.5)]))
    second = store[1]
    assert second.input_ids.tolist() == [A, B, EOS]
    assert second.actions_ixs.tolist() == [0, 1] and second.states_ixs.tolist() == [0, 1, 2]
    torch.testing.assert_close(second.rewards, torch.tensor([0.0, 2**-0.5]))

    batch = next(iter(store.create_loader(2, shuffle=False)))
    assert batch.input_ids.tolist() == [[A, B, C, D, E, F, EOS], [A, B, EOS, 0, 0, 0, 0]]
    assert batch.dones.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 2, 2, 2, 2]]


def test_string_sample_gets_a_bos_prompt(tokenizer):
    messages = tokenize_dialogue("hello world", tokenizer)
    assert messages[0] == DialogMessage(False, (tokenizer.bos_token_id,))
    assert messages[1].is_output and messages[1].tokens[-1] == tokenizer.eos_token_id


def test_dialogue_truncation_warns_and_keeps_the_budget(char_tokenizer):
    with pytest.warns(UserWarning, match="truncated to 5"):
        messages = tokenize_dialogue(["abc", "defgh"], char_tokenizer, max_length=5)
    assert sum(len(m.tokens) for m in messages) == 5
    assert [m.is_output for m in messages] == [False, True]


@pytest.mark.parametrize("rewards", [[0.5, 0.5, 0.5], [2.0]])
def test_equal_rewards_normalise_to_zero_not_nan(rewards):
    out = normalize_rewards(rewards)
    assert torch.isfinite(out).all() and (out == 0).all()


def test_rewards_normalise_to_zero_mean_unit_std():
    out = normalize_rewards([1.0, 2.0, 6.0])
    assert out.mean().item() == pytest.approx(0, abs=1e-6)
    assert out.std().item() == pytest.approx(1, rel=1e-5)


def test_sft_store_masks_prompt_tokens(char_tokenizer):
    store = make_sft_experience([["ab", "c"], "de"], char_tokenizer, max_length=64)
    assert store[0]["input_ids"].tolist() == [A, B, C, EOS]
    assert store[0]["labels"].tolist() == [-100, -100, C, EOS]
    assert store[1]["input_ids"].tolist() == [EOS, D, E, EOS]  # ByT5 has no BOS: EOS is the prompt
    assert store[1]["labels"].tolist() == [-100, D, E, EOS]


def _tiny_gpt2(vocab_size):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config).eval()


def test_sft_loss_is_the_same_with_left_and_right_padding(make_tokenizer):
    """trlX's SFT learned nothing with left padding: it passed no position ids. The collate
    function's position ids make left-padded batches give the right-padded loss."""
    samples = [["the movie", " was great"], "a terrible film with awful dialogue and more", ["hello", " world"]]
    losses = {}
    for side in ("left", "right"):
        tokenizer = make_tokenizer(padding_side=side)
        model = _tiny_gpt2(len(tokenizer))
        batch = next(iter(make_sft_experience(samples, tokenizer).create_loader(3)))
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           position_ids=batch["position_ids"]).logits
            losses[side] = sft_loss(logits, batch["labels"]).item()
            if side == "left":  # without position ids (trlX) the left-padded loss is different
                no_pos = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                losses["left_without_positions"] = sft_loss(no_pos, batch["labels"]).item()
    assert losses["left"] == pytest.approx(losses["right"], rel=1e-5)
    assert abs(losses["left_without_positions"] - losses["right"]) > 1e-4


def test_sft_loss_ignores_padding_and_prompt():
    logits = torch.randn(1, 4, 6)
    labels = torch.tensor([[-100, 2, 3, -100]])
    want = torch.nn.functional.cross_entropy(logits[0, :2], torch.tensor([2, 3]))
    assert sft_loss(logits, labels).item() == pytest.approx(want.item(), rel=1e-6)


def _rollout(query, response, hidden=None):
    from rlkit_methods.ppo.store import PPORLElement

    n = len(response)
    return PPORLElement(query_tensor=torch.tensor(query), response_tensor=torch.tensor(response), logprobs=torch.zeros(n),
                        values=torch.zeros(n), rewards=torch.zeros(n), trunk=hidden)


def test_kept_trunk_rows_are_padded_like_the_tokens_they_belong_to():
    from rlkit_methods.ppo.store import ppo_collate_fn

    # each trunk row holds its token id, so alignment is visible
    rows = lambda ids: torch.tensor(ids, dtype=torch.float).unsqueeze(1).repeat(1, 3)  # noqa: E731
    elems = [_rollout([5, 6], [7], rows([5, 6, 7])), _rollout([8], [9, 10, 11], rows([8, 9, 10, 11]))]
    batch = ppo_collate_fn("left", 0, elems)
    tokens = torch.cat([batch.query_tensors, batch.response_tensors], dim=1)
    assert batch.trunk.shape == (2, tokens.shape[1], 3)
    real = batch.attention_mask.bool()
    assert torch.equal(batch.trunk[..., 0][real], tokens[real].float())
    assert batch.trunk[~real].abs().sum() == 0


def test_kept_trunk_in_some_rollouts_only_is_an_error():
    from rlkit_methods.ppo.store import ppo_collate_fn

    elems = [_rollout([5], [7], torch.zeros(2, 3)), _rollout([8], [9])]
    with pytest.raises(ValueError, match="trunk must cover each rollout"):
        ppo_collate_fn("left", 0, elems)
    assert ppo_collate_fn("left", 0, [_rollout([8], [9])]).trunk is None
