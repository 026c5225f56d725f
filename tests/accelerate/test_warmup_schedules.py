"""LR warmup through transformers' schedule functions: ``scheduler.name: linear_with_warmup``,
``cosine_with_warmup`` or ``constant_with_warmup``, ``num_training_steps`` from train.total_steps."""

import json

import pytest
import torch

from rlkit_accelerate.optim import make_scheduler
from rlkit_methods.config_checks import class_kwargs


def lrs(name, kwargs, total_steps=10):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make_scheduler(name, kwargs, optimizer, total_steps)
    out = []
    for _ in range(total_steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out, scheduler


def test_warmup_then_decay_as_transformers_computes_it():
    linear, _ = lrs("linear_with_warmup", {"num_warmup_steps": 2})
    assert linear[:3] == [0.0, 0.5, 1.0] and linear[-1] == pytest.approx(0.125)
    cosine, scheduler = lrs("cosine_with_warmup", {"num_warmup_steps": 2})
    assert cosine[:3] == [0.0, 0.5, 1.0] and cosine[6] == pytest.approx(0.5) and cosine[-1] < 0.05
    constant, _ = lrs("constant_with_warmup", {"num_warmup_steps": 4})
    assert constant == [0.0, 0.25, 0.5, 0.75] + [1.0] * 6
    # num_training_steps given in the config wins over train.total_steps
    longer, _ = lrs("linear_with_warmup", {"num_warmup_steps": 2, "num_training_steps": 20})
    assert longer[-1] == pytest.approx(11 / 18)  # (20 - 9) / (20 - 2)
    # the state a checkpoint writes (scheduler.json) is JSON and restores the position
    state = json.loads(json.dumps(scheduler.state_dict()))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    again = make_scheduler("cosine_with_warmup", {"num_warmup_steps": 2}, optimizer, 10)
    again.load_state_dict(state)
    assert again.last_epoch == 10


def test_a_misspelled_warmup_argument_is_named_before_the_run():
    errors = class_kwargs("scheduler", "linear_with_warmup", {"num_warmup_step": 2}, skip=1)
    assert errors == ["scheduler.kwargs.num_warmup_step: get_linear_schedule_with_warmup has no such argument; "
                      "did you mean num_warmup_steps?"]
    assert class_kwargs("scheduler", "cosine_with_warmup", {"num_warmup_steps": 2, "num_cycles": 0.5}, skip=1) == []
