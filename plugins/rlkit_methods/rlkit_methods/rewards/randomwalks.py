"""trlX's randomwalks task: walk a random directed graph to the goal node ``a`` in as few
steps as possible.

The graph, the walks and the shortest paths are generated exactly as in trlX's
``examples/randomwalks`` (same ``numpy.random.RandomState`` calls, so the same seed gives the
same graph): ``n_nodes`` nodes named by letters, an edge i -> j with probability ``p_edge``,
every node with at least one outgoing edge, node 0 (``a``) the absorbing goal, walks of at
most ``max_length`` nodes. The metric::

    optimality = (max_length - length) / (max_length - shortest(start))

where ``length`` is the number of nodes up to and including the first ``a``. Fixed here,
where trlX crashed or gave NaN or negative values: a walk that is invalid (a letter that is
not a node, a missing edge, a non-letter), unfinished, longer than ``max_length``, empty, or
starting at the goal scores 0; a start whose shortest path is ``max_length`` long (or has no
path at all) scores 1 for a valid finished walk and 0 otherwise.
"""

from __future__ import annotations

import functools
import inspect
from collections import deque
from typing import Any, Callable

import numpy as np

INVALID_LENGTH = 100  # trlX's length for an invalid walk
GOAL = 0


class RandomWalks:
    """The graph and its metric for one seed."""

    def __init__(self, seed: int = 1000, n_nodes: int = 21, max_length: int = 10, p_edge: float = 0.1,
                 n_walks: int = 1000, delimiter: str = ""):
        if not 2 <= n_nodes <= 26:
            raise ValueError(f"n_nodes: must be in [2, 26] (one letter per node), got {n_nodes}")
        self.n_nodes, self.max_length, self.delimiter = n_nodes, max_length, delimiter
        random_state = np.random.RandomState(seed)
        while True:
            adjacency = random_state.rand(n_nodes, n_nodes) > (1 - p_edge)
            np.fill_diagonal(adjacency, 0)
            if np.all(adjacency.sum(1)):  # every node has an outgoing edge
                break
        adjacency[GOAL, :] = 0
        adjacency[GOAL, GOAL] = 1  # the goal is absorbing
        self.adjacency = adjacency
        self.char_to_node = {chr(ix + ord("a")): ix for ix in range(n_nodes)}
        self.node_to_char = {ix: c for c, ix in self.char_to_node.items()}

        self.walks: list[str] = []
        for _ in range(n_walks):
            node = GOAL
            while node == GOAL:
                node = random_state.randint(n_nodes)
            nodes = [node]
            for _step in range(max_length - 1):
                node = random_state.choice(np.nonzero(adjacency[node])[0])
                nodes.append(node)
                if node == GOAL:
                    break
            self.walks.append(delimiter.join(self.node_to_char[ix] for ix in nodes))
        # shortest[start]: nodes on the shortest path start -> goal, capped at max_length
        self.shortest = {start: min(self._path_nodes(start), max_length) for start in range(1, n_nodes)}

    def _path_nodes(self, start: int) -> int:
        """Breadth-first search; the number of nodes on a shortest path, or max_length if none."""
        seen, queue = {start: 1}, deque([start])
        while queue:
            node = queue.popleft()
            if node == GOAL:
                return seen[node]
            for nxt in np.nonzero(self.adjacency[node])[0]:
                if int(nxt) not in seen:
                    seen[int(nxt)] = seen[node] + 1
                    queue.append(int(nxt))
        return self.max_length

    @property
    def eval_prompts(self) -> list[str]:
        """The distinct start letters of the walks (trlX's evaluation prompts)."""
        return [p + self.delimiter for p in sorted({w[0] for w in self.walks})]

    @property
    def logit_mask(self):
        """(n_nodes, n_nodes) bool tensor, True where the move is forbidden (no edge)."""
        import torch

        return torch.tensor(~self.adjacency)

    def walk_length(self, sample: str) -> int:
        """Nodes up to and including the first goal; INVALID_LENGTH if invalid or unfinished."""
        if self.delimiter:
            sample = sample.replace(self.delimiter, "")
        nodes = [self.char_to_node.get(c) for c in sample]
        for i, node in enumerate(nodes):
            if node is None or (i > 0 and not self.adjacency[nodes[i - 1], node]):
                return INVALID_LENGTH
            if node == GOAL:
                return i + 1 if i > 0 and i + 1 <= self.max_length else INVALID_LENGTH
        return INVALID_LENGTH

    def optimality(self, sample: str) -> float:
        length = self.walk_length(sample)
        if length == INVALID_LENGTH:
            return 0.0
        shortest = self.shortest[self.char_to_node[(sample.replace(self.delimiter, "") if self.delimiter else sample)[0]]]
        if shortest >= self.max_length:
            return 1.0
        return (self.max_length - length) / (self.max_length - shortest)

    def metric(self, samples, prompts=None, outputs=None, **kwargs) -> dict[str, list[float]]:
        """trlX's metric: ``{"lengths": [...], "optimality": [...]}``, one value per sample."""
        return {
            "lengths": [float(self.walk_length(s)) for s in samples],
            "optimality": [self.optimality(s) for s in samples],
        }


@functools.lru_cache(maxsize=8)
def random_walks(seed: int = 1000, n_nodes: int = 21, max_length: int = 10, p_edge: float = 0.1,
                 n_walks: int = 1000, delimiter: str = "") -> RandomWalks:
    """The (cached) task for these settings."""
    return RandomWalks(seed, n_nodes, max_length, p_edge, n_walks, delimiter)


def randomwalks_metric(**settings: Any) -> Callable[..., dict[str, list[float]]]:
    """Metric factory (``metric: {name: randomwalks}``): lengths and optimality."""
    return random_walks(**settings).metric


def randomwalks_reward(**settings: Any) -> Callable[..., list[float]]:
    """Reward factory (``reward: {name: randomwalks}``): the optimality of each sample."""
    task = random_walks(**settings)

    def reward_fn(samples, prompts=None, outputs=None, **kwargs) -> list[float]:
        return [task.optimality(s) for s in samples]

    return reward_fn


def randomwalks_prompts(repeat: int = 1, **settings: Any) -> list[str]:
    """Source: the start letters (prompts for PPO and evaluation), each ``repeat`` times
    (trlX evaluates 50 samples per start letter)."""
    if repeat < 1:
        raise ValueError(f"repeat: must be >= 1, got {repeat}")
    return random_walks(**settings).eval_prompts * repeat


def randomwalks_walks(with_rewards: bool = True, split_prompt: bool = True, **settings: Any) -> list[Any]:
    """Source: the generated walks, each ``{"sample", "reward"}`` (ILQL) or bare (SFT).

    ``split_prompt`` (default, trlX's example format): each walk as ``[start letter, rest]``,
    a prompt and an output; the pipeline appends EOS to the output, so a sample is
    ``[start, rest + EOS]`` and the loss covers the moves and the stop, not the given start
    (the reward stays the whole walk's). ``split_prompt: false``: the whole walk as one
    string, which the pipeline tokenizes as ``[BOS, walk + EOS]`` (rlkit's earlier default)."""
    task = random_walks(**settings)
    samples = [[w[:1], w[1:]] for w in task.walks] if split_prompt else list(task.walks)
    if not with_rewards:
        return samples
    return [{"sample": s, "reward": task.optimality(w)} for s, w in zip(samples, task.walks)]


def generate_random_walks(n_nodes: int = 21, max_length: int = 10, n_walks: int = 1000, p_edge: float = 0.1,
                          seed: int = 1002, gpt2_tokenizer: bool = False):
    """trlX's ``examples.randomwalks.generate_random_walks``, same arguments and results:
    ``(metric_fn, eval_prompts, sample_walks, adjacency)`` with ``adjacency`` a bool tensor,
    True where an edge exists (trlX's ``logit_mask``; :attr:`RandomWalks.logit_mask` is the
    inverse, True where a move is forbidden). ``gpt2_tokenizer`` puts ``|`` between nodes.
    The metric is rlkit's, which scores invalid walks 0 where trlX gave NaN or negatives."""
    import torch

    task = random_walks(seed, n_nodes, max_length, p_edge, n_walks, "|" if gpt2_tokenizer else "")
    return task.metric, task.eval_prompts, list(task.walks), torch.tensor(task.adjacency)


def _settings_in_signature(*functions: Callable) -> None:
    """``**settings`` go on to :func:`random_walks`: their names join each function's signature,
    so that `rlkit config validate` names a misspelled one (``kwargs`` a source does not take)."""
    settings = [p.replace(kind=p.KEYWORD_ONLY) for p in inspect.signature(random_walks).parameters.values()]
    for fn in functions:
        own = [p for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD]
        fn.__signature__ = inspect.Signature(own + settings)


_settings_in_signature(randomwalks_metric, randomwalks_reward, randomwalks_prompts, randomwalks_walks)
