"""``randomwalks_walks``: [start letter, rest] pairs by default (trlX's example format), whole walks
with ``split_prompt=False``."""

from rlkit_methods.rewards.randomwalks import random_walks, randomwalks_walks


def test_split_prompt_gives_start_and_rest_with_the_whole_walks_rewards_in_order():
    task = random_walks(seed=1000)
    items = randomwalks_walks(seed=1000)  # the default: trlX's format
    assert len(items) == len(task.walks)
    for item, walk in zip(items, task.walks):
        prompt, output = item["sample"]
        assert len(prompt) == 1 and output and prompt + output == walk
        assert item["reward"] == task.optimality(walk)
    assert len({item["reward"] for item in items}) > 1  # the rewards do vary, so their order is tested


def test_split_prompt_without_rewards_gives_bare_pairs():
    pairs = randomwalks_walks(seed=1000, n_walks=5, with_rewards=False, split_prompt=True)
    assert ["".join(p) for p in pairs] == randomwalks_walks(seed=1000, n_walks=5, with_rewards=False, split_prompt=False)
    assert all(isinstance(p, list) and len(p) == 2 and len(p[0]) == 1 for p in pairs)
