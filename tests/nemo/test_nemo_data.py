"""ShuffledCyclicSequence: every epoch is a permutation of the data, reproducible by seed."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit_nemo import ShuffledCyclicSequence


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), epochs=st.integers(1, 4), extra=st.integers(0, 39), seed=st.integers(0, 10**6))
def test_each_epoch_holds_every_sample_once(n, epochs, extra, seed):
    data = list(range(n))
    extra = extra % n
    seq = ShuffledCyclicSequence(n * epochs + extra, data, seed)
    items = [seq[i] for i in range(len(seq))]
    assert len(items) == n * epochs + extra
    for e in range(epochs):
        assert sorted(items[e * n : (e + 1) * n]) == data
    assert len(set(items[epochs * n :])) == extra  # a partial epoch never repeats a sample


def test_same_seed_same_order_other_seed_other_order():
    data = list(range(50))
    a = [ShuffledCyclicSequence(100, data, 3)[i] for i in range(100)]
    b = [ShuffledCyclicSequence(100, data, 3)[i] for i in range(100)]
    c = [ShuffledCyclicSequence(100, data, 4)[i] for i in range(100)]
    assert a == b and a != c
    assert a[:50] != a[50:]  # epochs are reshuffled


def test_indexing_and_errors():
    seq = ShuffledCyclicSequence(5, ["x", "y"], 0)
    assert seq[-1] == seq[4]
    with pytest.raises(IndexError):
        seq[5]
    with pytest.raises(ValueError, match="data is empty"):
        ShuffledCyclicSequence(3, [], 0)
