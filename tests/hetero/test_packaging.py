"""What a host's package reveals by its order: a uniform shuffle, random ids, a private lookup."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from p2pboost.hetero.training.host_tree import _Lookup, _random_ids, _random_order


def test_order_is_a_uniform_permutation() -> None:
    assert _random_order(0).size == 0
    for n in (1, 5, 300):
        assert sorted(_random_order(n).tolist()) == list(range(n))
    # Every order of 3 candidates about equally often (6000 draws, 6 orders: 1000 +- 5 sd).
    counts = Counter(tuple(_random_order(3).tolist()) for _ in range(6000))
    assert set(counts) == set(itertools.permutations(range(3)))
    assert all(abs(c - 1000) < 5 * np.sqrt(1000 * 5 / 6) for c in counts.values())
    # Whatever shard or feature a candidate came from, it lands anywhere: position of item 0.
    first = Counter(int(np.flatnonzero(_random_order(4) == 0)[0]) for _ in range(4000))
    assert all(abs(c - 1000) < 5 * np.sqrt(1000 * 3 / 4) for c in first.values())


def test_ids_are_distinct_63_bit_values() -> None:
    ids = _random_ids(5000)
    assert ids.dtype == np.uint64
    assert np.unique(ids).size == 5000
    assert int(ids.max()) < 1 << 63
    assert _random_ids(0).size == 0


def test_lookup_finds_known_ids_and_refuses_others() -> None:
    ids = np.array([7, 3, 11], dtype=np.uint64)
    by_id = np.argsort(ids)
    lookup = _Lookup(
        ids[by_id],
        np.array([0, 1, 2])[by_id],
        np.array([5, 6, 7])[by_id],
        np.array([True, False, True])[by_id],
    )
    pos = lookup.find(np.array([11, 7], dtype=np.uint64))
    assert pos is not None
    assert lookup.feature[pos].tolist() == [2, 0]
    assert lookup.bin[pos].tolist() == [7, 5]
    assert lookup.find(np.array([4], dtype=np.uint64)) is None
    assert lookup.find(np.array([12], dtype=np.uint64)) is None  # beyond every id
    assert lookup.find(np.array([], dtype=np.uint64)) is not None
