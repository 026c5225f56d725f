"""Built-in rewards and metrics, and check_scores."""

import math
import sys
import types

import pytest

from rlkit_core.testing import check_metric_fn, check_reward_fn

from rlkit_methods.rewards import check_scores, python_function, vader_metric, vader_reward
from rlkit_methods.rewards.randomwalks import random_walks, randomwalks_metric, randomwalks_reward, randomwalks_walks

# Recorded from this implementation for trlX's settings with seed 1000 (21 nodes, p_edge 0.1,
# max_length 10); the shortest paths were cross-checked once against networkx.shortest_path.
SEED_1000_SHORTEST = {1: 3, 2: 4, 3: 2, 4: 4, 5: 3, 6: 5, 7: 5, 8: 3, 9: 3, 10: 3, 11: 4, 12: 4, 13: 2, 14: 5,
                      15: 4, 16: 4, 17: 4, 18: 3, 19: 4, 20: 4}
SEED_1000_FIRST_WALKS = ["sda", "fda", "ebjnbdtkna", "jnbjna", "lbusdtkbui"]
SEED_1000_FIRST_TEN = {
    "lengths": [3.0, 3.0, 10.0, 6.0, 100.0, 3.0, 100.0, 100.0, 7.0, 6.0],
    "optimality": [1.0, 1.0, 0.0, 4 / 7, 0.0, 1.0, 0.0, 0.0, 0.6, 4 / 7],
}
SEED_1000_MEAN_OPTIMALITY = 0.3515095238095238


def shortest_walk(task, start):
    """A shortest walk from ``start`` to the goal, by breadth-first search in the test."""
    frontier, parent = [start], {start: None}
    while frontier:
        node = frontier.pop(0)
        if node == 0:
            path = []
            while node is not None:
                path.append(node)
                node = parent[node]
            return "".join(chr(ord("a") + n) for n in reversed(path))
        for nxt in range(task.n_nodes):
            if task.adjacency[node, nxt] and nxt not in parent:
                parent[nxt] = node
                frontier.append(nxt)
    return None


def test_randomwalks_seed_1000_recorded_values():
    task = random_walks(seed=1000)
    assert task.shortest == SEED_1000_SHORTEST
    assert task.walks[:5] == SEED_1000_FIRST_WALKS
    metric = randomwalks_metric(seed=1000)(task.walks[:10])
    assert metric["lengths"] == SEED_1000_FIRST_TEN["lengths"]
    assert metric["optimality"] == pytest.approx(SEED_1000_FIRST_TEN["optimality"])
    everything = task.metric(task.walks)["optimality"]
    assert sum(everything) / len(everything) == pytest.approx(SEED_1000_MEAN_OPTIMALITY)
    assert task.eval_prompts == [chr(ord("a") + i) for i in range(1, 21)]


def test_shortest_path_scores_one_and_invalid_scores_zero():
    task = random_walks(seed=1000)
    for start in range(1, task.n_nodes):
        walk = shortest_walk(task, start)
        assert len(walk) == task.shortest[start]
        assert task.optimality(walk) == 1.0
    start = "b"
    missing = next(chr(ord("a") + j) for j in range(1, 21) if not task.adjacency[1, j])
    for invalid in [start + missing + "a", "b?a", "b", "", "a", "b b", "bZa", "x" * 50, "1234"]:
        assert task.optimality(invalid) == 0.0, invalid
    scores = randomwalks_reward(seed=1000)(["", "zz", "!!", "sda"])
    assert scores == [0.0, 0.0, 0.0, 1.0] and all(math.isfinite(s) for s in scores)


def test_optimality_formula_for_a_longer_walk():
    task = random_walks(seed=1000)
    walk = "jnbjna"  # 6 nodes from j (shortest 3): (10 - 6) / (10 - 3)
    assert task.optimality(walk) == pytest.approx(4 / 7)


def test_walk_sources_carry_rewards_and_contracts_hold():
    items = randomwalks_walks(seed=1000, n_walks=20, split_prompt=False)
    assert all(set(i) == {"sample", "reward"} for i in items)
    walks = [i["sample"] for i in items]
    check_reward_fn(randomwalks_reward(seed=1000, n_walks=20), walks, ["b"] * 20, walks)
    check_metric_fn(randomwalks_metric(seed=1000, n_walks=20), walks, ["b"] * 20, walks)
    assert randomwalks_walks(seed=1000, n_walks=3, with_rewards=False, split_prompt=False) == SEED_1000_FIRST_WALKS[:3]
    mask = random_walks(seed=1000).logit_mask
    assert mask.shape == (21, 21) and not mask[0, 0] and bool(mask[1, 1])


def test_vader_reward_scores_outputs_in_range():
    fn = vader_reward()
    scores = check_reward_fn(fn, ["p good", "p bad"], ["p", "p"], ["I love this wonderful movie", "awful, terrible, boring"])
    assert scores[0] > 0.5 and scores[1] < -0.5 and all(-1 <= s <= 1 for s in scores)
    assert vader_reward(on="samples")(["I love it"], outputs=["awful"])[0] > 0
    assert vader_metric()(["x"], outputs=["great"])["sentiment"][0] > 0
    with pytest.raises(ValueError, match="on: must be"):
        vader_reward(on="prompts")


def test_python_function_reward_binds_kwargs(monkeypatch):
    module = types.ModuleType("my_rewards")
    module.length = lambda samples, prompts=None, outputs=None, scale=1.0, **kw: [scale * len(s) for s in samples]
    monkeypatch.setitem(sys.modules, "my_rewards", module)
    fn = python_function("my_rewards:length", scale=2.0)
    assert check_reward_fn(fn, ["ab", "abc"], ["", ""], ["ab", "abc"]) == [4.0, 6.0]
    with pytest.raises(ValueError, match="expected 'module:function'"):
        python_function("my_rewards.length")
    with pytest.raises(ValueError, match="has no attribute nope"):
        python_function("my_rewards:nope")


def test_check_scores_accepts_numbers_tensors_and_dense_lists():
    import numpy as np
    import torch

    assert check_scores([1, 2.5], 2) == [1.0, 2.5]
    assert check_scores(torch.tensor([0.5, 1.0]), 2) == [0.5, 1.0]
    assert check_scores(np.array([1.0]), 1) == [1.0]
    assert check_scores([[0.1, 0.2], torch.tensor([1.0])], 2) == [[0.1, 0.2], [1.0]]


@pytest.mark.parametrize(
    "scores, message",
    [([1.0], "returned 1 scores for 2 samples"),
     ([1.0, "high"], "score 1 is 'high' \\(str\\), not a number"),
     ([1.0, None], "score 1 is None"),
     ([float("nan"), 1.0], "score 0 is nan"),
     ([1.0, float("inf")], "score 1 is inf"),
     ({"a": 1}, "returned dict"),
     (None, "returned NoneType"),
     ([True, 1.0], "score 0 is True")],
)
def test_check_scores_errors(scores, message):
    with pytest.raises(ValueError, match=message):
        check_scores(scores, 2)
