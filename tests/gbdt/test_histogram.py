from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import choose_grid, quantize
from p2pboost.gbdt.histogram import (
    DenseHistogramBuilder,
    Histogram,
    SparseHistogramBuilder,
    default_bin_density,
    make_builder,
)


def _data(n: int, n_features: int, seed: int, missing: float = 0.05) -> BinnedData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    X[:, ::3] = np.where(rng.random((n, X[:, ::3].shape[1])) < 0.7, 0.0, X[:, ::3])  # sparse
    X[rng.random(X.shape) < missing] = np.nan
    return BinMapper(16).fit_transform(X)


def _gradients(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, k)) * 3.0
    h = rng.random((n, k))
    return quantize(g, choose_grid(g, n)), quantize(h, choose_grid(h, n))


def _reference(
    data: BinnedData, rows: np.ndarray, slots: np.ndarray, k: int, g: np.ndarray, h: np.ndarray
) -> Histogram:
    """The definition of a histogram, by ``np.add.at`` (unbuffered, independent of bincount)."""
    shape = (k, data.n_features, data.n_slots, g.shape[1])
    G, H = np.zeros(shape), np.zeros(shape)
    C = np.zeros(shape[:3], dtype=np.int64)
    for f in range(data.n_features):
        at: tuple[Any, ...] = (slots, f, data.codes[f, rows].astype(np.intp))
        np.add.at(G, at, g[rows])
        np.add.at(H, at, h[rows])
        np.add.at(C, at, 1)
    return Histogram(G, H, C)


def _same(a: Histogram, b: Histogram) -> bool:
    counts = a.count is None or b.count is None or np.array_equal(a.count, b.count)
    return bool(np.array_equal(a.grad, b.grad) and np.array_equal(a.hess, b.hess) and counts)


@pytest.mark.parametrize("builder_cls", [DenseHistogramBuilder, SparseHistogramBuilder])
@pytest.mark.parametrize(("n", "n_features"), [(60, 5), (7000, 12)])  # small and lane paths
def test_builders_equal_the_definition(builder_cls: type, n: int, n_features: int) -> None:
    data = _data(n, n_features, seed=n)
    g, h = _gradients(n, 2, seed=1)
    builder = builder_cls(data, with_counts=True)
    root = builder.build(None, None, 1, g, h)
    assert _same(root, _reference(data, np.arange(n), np.zeros(n, np.int64), 1, g, h))
    rng = np.random.default_rng(2)
    rows = np.sort(rng.choice(n, size=n // 2, replace=False))
    slots = rng.integers(0, 3, size=rows.size)
    layer = builder.build(rows, slots, 3, g, h)
    assert _same(layer, _reference(data, rows, slots, 3, g, h))


@pytest.mark.parametrize("sparse", [False, True])
def test_subtraction_equals_direct_sibling_exactly(sparse: bool) -> None:
    n = 5000
    data = _data(n, 9, seed=3)
    g, h = _gradients(n, 1, seed=4)
    builder = make_builder(data, sparse=sparse, with_counts=True)
    rng = np.random.default_rng(5)
    parent_rows = np.sort(rng.choice(n, size=4000, replace=False))
    in_left = rng.random(parent_rows.size) < 0.3
    parent = builder.build(parent_rows, None, 1, g, h)
    left = builder.build(parent_rows[in_left], None, 1, g, h)
    right = builder.build(parent_rows[~in_left], None, 1, g, h)
    derived = parent - left
    # Exact equality, not allclose: the gradients are on the fixed-point grid.
    assert np.array_equal(derived.grad, right.grad)
    assert np.array_equal(derived.hess, right.hess)
    assert derived.count is not None
    assert right.count is not None
    assert np.array_equal(derived.count, right.count)


def test_sparse_equals_dense_exactly_on_layers() -> None:
    n = 4000
    data = _data(n, 10, seed=6, missing=0.2)
    g, h = _gradients(n, 3, seed=7)
    dense = DenseHistogramBuilder(data, with_counts=True)
    sparse = SparseHistogramBuilder(data, with_counts=True)
    assert sparse.density < 0.9
    assert _same(dense.build(None, None, 1, g, h), sparse.build(None, None, 1, g, h))
    rng = np.random.default_rng(8)
    for k in (1, 2, 7):
        rows = np.sort(rng.choice(n, size=int(rng.integers(1, n)), replace=False))
        slots = rng.integers(0, k, size=rows.size)
        assert _same(dense.build(rows, slots, k, g, h), sparse.build(rows, slots, k, g, h))


def test_counts_are_optional() -> None:
    data = _data(100, 4, seed=9)
    g, h = _gradients(100, 1, seed=10)
    assert DenseHistogramBuilder(data).build(None, None, 1, g, h).count is None


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 400),
    n_features=st.integers(1, 6),
    scale=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**16),
)
def test_every_feature_histogram_sums_to_the_gradient_total(
    n: int, n_features: int, scale: float, seed: int
) -> None:
    data = _data(n, n_features, seed=seed)
    g, h = _gradients(n, 1, seed=seed + 1)
    g = quantize(g * scale, choose_grid(g * scale, n))
    hist = DenseHistogramBuilder(data).build(None, None, 1, g, h)
    totals = hist.grad[0, :, :, 0].sum(axis=1)
    assert np.all(totals == g.sum())


def test_histograms_of_feature_blocks_join_to_the_whole() -> None:
    """What the federated guest does: guest features' histograms, then the host's."""
    data = _data(500, 6, seed=11)
    g, h = _gradients(500, 1, seed=12)
    whole = DenseHistogramBuilder(data, with_counts=True).build(None, None, 1, g, h)
    guest = BinnedData(data.codes[:4], data.n_slots)
    host = BinnedData(data.codes[4:], data.n_slots)
    parts = [
        DenseHistogramBuilder(d, with_counts=True).build(None, None, 1, g, h) for d in (guest, host)
    ]
    assert _same(Histogram.concat_features(parts), whole)


def test_auto_builder_follows_density() -> None:
    dense_data = _data(400, 4, seed=13, missing=0.0)
    sparse_data = BinMapper(8).fit_transform(np.where(np.eye(400, 5, dtype=bool), 1.0, 0.0))
    assert default_bin_density(sparse_data) == pytest.approx(5 / 2000)
    assert isinstance(make_builder(sparse_data, "auto", False), SparseHistogramBuilder)
    assert isinstance(make_builder(dense_data, "auto", False), DenseHistogramBuilder)
    assert isinstance(make_builder(sparse_data, False, False), DenseHistogramBuilder)
