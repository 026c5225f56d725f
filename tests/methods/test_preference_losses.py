"""The preference and logged-data losses against values computed by hand."""

import math

import pytest
import torch

from rlkit_methods.logged.losses import (
    group_relative_advantages,
    importance_weights,
    leave_one_out_advantages,
    logged_pg_loss,
)
from rlkit_methods.preferences.losses import (
    bradley_terry_loss,
    dpo_loss,
    dpo_metrics,
    pairwise_accuracy,
    sequence_logps,
)


def logsig(x):
    return -math.log1p(math.exp(-x))


def test_bradley_terry_with_margin_and_centering():
    rc, rr = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0])
    plain = -(logsig(1.0) + logsig(0.0)) / 2  # 0.50320
    assert bradley_terry_loss(rc, rr).item() == pytest.approx(plain, abs=1e-6)
    # margin m: -log sigma(r_c - r_r - m); a margin met exactly costs log 2
    assert bradley_terry_loss(rc, rr, margin=torch.tensor([1.0, 0.0])).item() == pytest.approx(math.log(2), abs=1e-6)
    centred = bradley_terry_loss(rc, rr, center_rewards_coefficient=0.1).item()
    assert centred == pytest.approx(plain + 0.1 * (1.0 + 0.0) / 2, abs=1e-6)


def test_pairwise_accuracy_counts_wins_and_half_the_ties():
    # wins, tie, win, loss: (1 + 0.5 + 1 + 0) / 4
    assert pairwise_accuracy(torch.tensor([1.0, 0.0, 2.0, -1.0]), torch.tensor([0.0, 0.0, 1.0, 0.0])).item() == 0.625
    assert pairwise_accuracy(torch.zeros(3), torch.zeros(3)).item() == 0.5  # a fresh zero head: chance


def test_sequence_logps_sum_or_token_mean():
    lp, mask = torch.tensor([[-1.0, -2.0, -9.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    assert sequence_logps(lp, mask).item() == -3.0
    assert sequence_logps(lp, mask, average=True).item() == -1.5


# chosen/rejected log-probs -1/-3, reference -2/-2: h = (-1 + 2) - (-3 + 2) = 2
PAIR = dict(chosen_logps=torch.tensor([-1.0]), rejected_logps=torch.tensor([-3.0]),
            ref_chosen_logps=torch.tensor([-2.0]), ref_rejected_logps=torch.tensor([-2.0]))


@pytest.mark.parametrize("loss_type,beta,label_smoothing,expected", [
    ("sigmoid", 0.5, 0.0, -logsig(1.0)),  # -log sigma(beta h) = 0.31326
    ("sigmoid", 0.5, 0.1, -0.9 * logsig(1.0) - 0.1 * logsig(-1.0)),  # 0.41326
    ("ipo", 0.5, 0.0, (2 - 1 / (2 * 0.5)) ** 2),  # 1
    ("hinge", 0.5, 0.0, 0.0),  # max(0, 1 - 1)
    ("hinge", 0.25, 0.0, 0.5),  # max(0, 1 - 0.5)
])
def test_dpo_losses(loss_type, beta, label_smoothing, expected):
    losses, chosen, rejected = dpo_loss(**PAIR, beta=beta, loss_type=loss_type, label_smoothing=label_smoothing)
    assert losses.item() == pytest.approx(expected, abs=1e-6)
    assert chosen.item() == pytest.approx(beta * 1.0) and rejected.item() == pytest.approx(beta * -1.0)


def test_dpo_metrics_as_trl_logs_them():
    chosen, rejected = torch.tensor([0.5, -0.2]), torch.tensor([-0.5, 0.1])
    m = dpo_metrics(chosen, rejected, torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -4.0]))
    assert m["rewards/accuracies"] == 0.5
    assert m["rewards/margins"] == pytest.approx((1.0 - 0.3) / 2)
    assert m["rewards/chosen"] == pytest.approx(0.15) and m["logps/rejected"] == -3.5


def test_dpo_rejects_an_unknown_loss_type():
    with pytest.raises(ValueError, match="loss_type: 'robust' is not one of sigmoid, ipo, hinge"):
        dpo_loss(**PAIR, beta=0.1, loss_type="robust")


def test_group_relative_and_leave_one_out_advantages_over_ragged_groups():
    rewards, groups = torch.tensor([1.0, 2.0, 3.0, 5.0]), torch.tensor([0, 0, 0, 1])
    # group 0: mean 2, unbiased std 1; group 1 alone: 0
    expected = torch.tensor([-1.0, 0.0, 1.0, 0.0]) / torch.tensor([1 + 1e-4, 1 + 1e-4, 1 + 1e-4, 1.0])
    assert torch.allclose(group_relative_advantages(rewards, groups), expected)
    assert torch.equal(group_relative_advantages(rewards, groups, scale=False), torch.tensor([-1.0, 0.0, 1.0, 0.0]))
    # r_i minus the mean of the others: 1 - 2.5, 2 - 2, 3 - 1.5
    assert torch.equal(leave_one_out_advantages(rewards, groups), torch.tensor([-1.5, 0.0, 1.5, 0.0]))


def test_importance_weights_are_exactly_one_on_policy():
    torch.manual_seed(0)
    logprobs = torch.log_softmax(torch.randn(3, 5, 11), -1)[..., 0]  # (B, R) arbitrary log-probs
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float)
    w = importance_weights(logprobs, logprobs.clone(), mask, cap=2.0)
    assert torch.equal(w, mask)  # exactly 1 on every real token, 0 elsewhere


def test_importance_weights_are_truncated_at_the_cap():
    logp = torch.log(torch.tensor([[0.5, 0.1]]))
    mu = torch.log(torch.tensor([[0.25, 0.2]]))  # ratios 2 and 0.5
    w = importance_weights(logp, mu, torch.ones(1, 2), cap=1.5)
    assert torch.allclose(w, torch.tensor([[1.5, 0.5]]))
    assert torch.allclose(importance_weights(logp, mu, torch.ones(1, 2), cap=None), torch.tensor([[2.0, 0.5]]))


def test_logged_pg_loss_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0])
    # per-row token means -1.5 and -0.5: L = -(1 * -1.5 + -2 * -0.5) / 2
    loss = logged_pg_loss(logprobs, advantages, mask)
    assert loss.item() == pytest.approx(0.25)
    loss.backward()  # dL/dlog pi_it = -A_i m_it / (|y_i| B)
    assert torch.allclose(logprobs.grad, torch.tensor([[-0.25, -0.25, 0.0], [1.0, 0.0, 0.0]]))
    weighted = logged_pg_loss(logprobs.detach(), advantages, mask, weights=torch.tensor([[2.0, 0.0, 5.0], [1.0, 1.0, 1.0]]))
    assert weighted.item() == pytest.approx(-(1 * (-2.0 / 2) + -2 * -0.5) / 2)
