"""Adam and AdamW use torch's fused kernel by default (the bench's optimizer saving): the
same steps as the per-parameter loop to float tolerance, and ``fused: false`` opts out."""

import pytest
import torch

from rlkit_accelerate.optim import make_optimizer


def steps(name, kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    model[0].bias.requires_grad_(False)  # frozen parameters stay out of the optimizer
    opt = make_optimizer(name, kwargs, model.parameters())
    data = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    for _ in range(5):
        model(data).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return opt, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_fused_by_default_and_equal_to_the_loop(name):
    fused, fused_weights = steps(name, {"lr": 1e-2, "weight_decay": 0.01})
    loop, loop_weights = steps(name, {"lr": 1e-2, "weight_decay": 0.01, "fused": False})
    assert fused.defaults["fused"] is True and loop.defaults["fused"] is False
    for a, b in zip(fused_weights, loop_weights):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert not torch.equal(fused_weights[0], steps(name, {"lr": 0.0})[1][0])  # the steps moved the weights


def test_other_optimizers_are_left_alone():
    opt, _ = steps("sgd", {"lr": 1e-2})
    assert "fused" not in opt.defaults or not opt.defaults["fused"]
