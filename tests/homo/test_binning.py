"""Federated binning finds exactly the cut points the core learns on the union of the rows."""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from p2pboost.gbdt.binning import BinMapper
from p2pboost.homo._binning import EdgeSearch, child_counts, float_keys, key_floats


def _total(vectors: Iterable[Any]) -> Any:
    """What secure aggregation returns: the element-wise sum of the clients' vectors."""
    return functools.reduce(operator.add, vectors)


def _federated_edges(parts: list[np.ndarray], max_bin: int) -> tuple[list[np.ndarray], int]:
    keys = [[float_keys(col) for col in part.T] for part in parts]
    search = EdgeSearch(parts[0].shape[1], max_bin)
    rounds = 0
    while not search.done:
        q = search.query()
        search.feed(_total(child_counts(k, q) for k in keys))  # what secure aggregation returns
        rounds += 1
    return search.edges(), rounds


def test_keys_preserve_order_and_round_trip() -> None:
    x = np.array([-np.inf, -3.5, -1e-300, -0.0, 0.0, 5e-324, 1.0, 2.5e300, np.nan])
    k = float_keys(x)
    assert np.all(np.diff(k.astype(object)) >= 0)
    np.testing.assert_array_equal(key_floats(k), [-3.5, -1e-300, 0.0, 0.0, 5e-324, 1.0, 2.5e300])


@pytest.mark.parametrize("max_bin", [4, 32])
def test_edges_equal_binning_the_union(max_bin: int) -> None:
    rng = np.random.default_rng(3)
    n = 900
    X = np.column_stack(
        [
            rng.normal(size=n),  # many distinct values
            rng.integers(0, 3, size=n).astype(float),  # few distinct values
            np.round(rng.exponential(size=n), 1) - 0.5,  # ties, negatives
            np.full(n, 7.0),  # constant
            np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n) * 1e6),  # missing
            rng.integers(0, max_bin + 3, size=n).astype(float),  # just above max_bin
        ]
    )
    X[:, 5][X[:, 5] == 2] = -0.0
    parts = [X[:300], X[300:420], X[420:]]
    edges, rounds = _federated_edges(parts, max_bin)
    expected = BinMapper(max_bin).fit(X).edges
    assert len(edges) == len(expected)
    for got, want in zip(edges, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert rounds <= 24


def test_all_missing_feature_has_no_edges() -> None:
    X = np.column_stack([np.full(10, np.nan), np.arange(10.0)])
    edges, _ = _federated_edges([X[:4], X[4:]], 8)
    assert edges[0].size == 0
    np.testing.assert_array_equal(edges[1], BinMapper(8).fit(X).edges[1])
