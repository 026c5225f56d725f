"""Loop state files load without running code (issue 16, item 2): a malicious pickle is
refused in one line naming the file; RNG states and nested containers round-trip."""

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from rlkit_core.errors import RlkitError
from rlkit_methods.run.checkpoint import rng_state as rng_state_from_checkpoint
from rlkit_methods.run.state import read_state, rng_state, set_rng_state, write_state

class Boom:
    def __init__(self, mark: Path) -> None:
        self.mark = mark  # under the test's own tmp_path: two runs at once do not share it

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


def test_a_state_file_holding_code_is_refused_naming_it(tmp_path):
    mark = tmp_path / "pwned"
    path = tmp_path / "loop_state_0.pt"
    torch.save({"iter_count": 3, "evil": Boom(mark)}, path)
    with pytest.raises(RlkitError) as error:
        read_state(path)
    message = str(error.value)
    assert message.startswith(f"{path}: refused") and len(message.splitlines()) == 1
    assert not mark.exists()  # nothing ran


def test_a_truncated_state_file_is_named(tmp_path):
    path = tmp_path / "loop_state_0.pt"
    write_state(path, {"iter_count": 3, "w": torch.ones(100)})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RlkitError, match=rf"{path}: unreadable .* truncated or damaged"):
        read_state(path)


def test_rng_states_and_nested_containers_round_trip(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = tmp_path / "state.pt"
    write_state(path, {"rng": rng_state(), "nested": {"a": [1, 2.5, "x", (3, torch.zeros(2))]}, "position": [1, 0, 4]})
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    state = read_state(path)
    set_rng_state(state["rng"])
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])
    assert state["nested"]["a"][:3] == [1, 2.5, "x"] and torch.equal(state["nested"]["a"][3][1], torch.zeros(2))
    assert rng_state_from_checkpoint is rng_state  # one implementation
