from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.fixedpoint import choose_grid, quantize
from p2pboost.gbdt.histogram import DenseHistogramBuilder, Histogram
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.split import (
    candidate_mask,
    find_best_splits,
    leaf_weight,
    min_child_rows,
    split_gains,
)


def test_split_gain_formula() -> None:
    gain = split_gains(
        np.array([[2.0]]), np.array([[3.0]]), np.array([[5.0]]), np.array([[10.0]]), 1.0
    )
    expected = 2.0**2 / 4.0 + 3.0**2 / 8.0 - 5.0**2 / 11.0
    assert gain.shape == (1,)
    assert gain[0] == pytest.approx(expected)


def test_multi_output_gain_is_summed_over_outputs() -> None:
    GL, HL = np.array([1.0, -2.0]), np.array([2.0, 3.0])
    G, H = np.array([0.5, 1.0]), np.array([5.0, 6.0])
    total = split_gains(GL, HL, G, H, 0.5)
    parts = [
        split_gains(GL[k : k + 1], HL[k : k + 1], G[k : k + 1], H[k : k + 1], 0.5) for k in (0, 1)
    ]
    assert total == pytest.approx(parts[0] + parts[1])


def test_leaf_weight_is_zero_below_min_child_weight() -> None:
    w = leaf_weight(np.array([2.0, 2.0]), np.array([3.0, 0.5]), 1.0, 1.0)
    assert w.tolist() == [-0.5, 0.0]


def _layer(
    seed: int, n: int = 300, n_features: int = 4, max_bin: int = 6, k: int = 3
) -> tuple[BinMapper, Histogram, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features)).round(1)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[:, 1] = 0.0  # constant column: no candidates
    mapper = BinMapper(max_bin).fit(X)
    data = mapper.transform(X)
    g = rng.normal(size=(n, 1))
    h = rng.random((n, 1)) * 0.5
    g, h = quantize(g, choose_grid(g, n)), quantize(h, choose_grid(h, n))
    slots = rng.integers(0, k, n)
    hist = DenseHistogramBuilder(data, with_counts=True).build(np.arange(n), slots, k, g, h)
    G = np.stack([g[slots == s].sum(axis=0) for s in range(k)])
    H = np.stack([h[slots == s].sum(axis=0) for s in range(k)])
    N = np.bincount(slots, minlength=k)
    return mapper, hist, G, H, N


@pytest.mark.parametrize("seed", range(4))
def test_best_split_equals_brute_force_enumeration(seed: int) -> None:
    mapper, hist, G, H, N = _layer(seed)
    params = BoostParams(reg_lambda=0.7, min_child_weight=2.0, min_samples_leaf=5)
    cands = candidate_mask(mapper.n_bins, mapper.max_bin)
    got = find_best_splits(hist, G, H, N, cands, params)
    assert hist.count is not None
    n_features, n_thr = hist.grad.shape[1], hist.grad.shape[2] - 1
    for node in range(G.shape[0]):
        best: tuple[float, int, int, int] | None = None
        for f, t, d in itertools.product(range(n_features), range(n_thr), range(2)):
            if not cands[f, t, d]:
                continue
            bins = slice(0, t + 1)
            gl = hist.grad[node, f, bins].sum(axis=0) + (hist.grad[node, f, -1] if d == 0 else 0)
            hl = hist.hess[node, f, bins].sum(axis=0) + (hist.hess[node, f, -1] if d == 0 else 0)
            cnt = int(hist.count[node, f, bins].sum() + (hist.count[node, f, -1] if d == 0 else 0))
            if min(hl[0], H[node, 0] - hl[0]) < 2.0 or min(cnt, N[node] - cnt) < 5:
                continue
            gain = float(split_gains(gl, hl, G[node], H[node], 0.7))
            # Highest gain; ties to the lowest feature, then bin, then missing-left.
            if best is None or gain > best[0]:
                best = (gain, f, t, d)
        assert best is not None
        assert got.gain[node] == best[0]  # bit for bit: what the federated guest relies on
        assert (got.feature[node], got.threshold[node]) == (best[1], best[2])
        if got.default_left[node] != (best[3] == 0):
            # Only acceptable if the node has no missing values (both directions equal).
            assert hist.count[node, best[1], -1] == 0


def test_constant_features_and_masked_features_are_never_chosen() -> None:
    mapper, hist, G, H, _N = _layer(7)
    cands = candidate_mask(mapper.n_bins, mapper.max_bin)
    got = find_best_splits(hist, G, H, None, cands, BoostParams())
    assert not np.any(got.feature == 1)
    cands[0] = False
    got = find_best_splits(hist, G, H, None, cands, BoostParams())
    assert not np.any(np.isin(got.feature, [0, 1]))


def test_ties_go_to_the_lowest_feature_then_missing_left() -> None:
    """Two identical columns: the split must be on column 0; without missing, default left."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=200)
    X = np.column_stack([x, x, x])
    mapper = BinMapper(8).fit(X)
    data = mapper.transform(X)
    g = quantize((x > 0.3).astype(np.float64)[:, None] - 0.5, choose_grid(np.ones(1), 200))
    h = np.ones((200, 1))
    hist = DenseHistogramBuilder(data).build(None, None, 1, g, h)
    got = find_best_splits(
        hist, g.sum(0)[None], h.sum(0)[None], None, candidate_mask(mapper.n_bins, 8), BoostParams()
    )
    assert got.feature[0] == 0
    assert bool(got.default_left[0])


def test_missing_direction_is_learnt() -> None:
    """Missing rows behave like the high values, so they must go right."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=400)
    target = (x > 0).astype(np.float64)
    x[rng.random(400) < 0.2] = np.nan
    target[np.isnan(x)] = 1.0
    mapper = BinMapper(16).fit(x[:, None])
    data = mapper.transform(x[:, None])
    g = quantize(0.5 - target[:, None], choose_grid(np.ones(1), 400))
    h = np.full((400, 1), 0.25)
    hist = DenseHistogramBuilder(data).build(None, None, 1, g, h)
    got = find_best_splits(
        hist, g.sum(0)[None], h.sum(0)[None], None, candidate_mask(mapper.n_bins, 16), BoostParams()
    )
    assert not bool(got.default_left[0])
    assert mapper.threshold(0, int(got.threshold[0])) == pytest.approx(0.0, abs=0.3)


@given(
    mcw=st.floats(0.0, 10.0),
    mag=st.integers(-3, 3),
    msl=st.integers(1, 20),
    data=st.data(),
)
def test_min_child_rows_never_rejects_a_valid_child(
    mcw: float, mag: int, msl: int, data: st.DataObject
) -> None:
    """Fewer rows than ``min_child_rows`` cannot reach ``min_child_weight`` with hessians at
    most ``2**mag`` (so a host may leave such candidates out), and that many rows can."""
    rows = min_child_rows(msl, mcw, mag)
    assert rows >= msl
    bound = math.ldexp(1.0, mag)
    if rows > msl:  # the hessian rule binds: one row fewer, every hessian at its bound, fails
        assert (rows - 1) * bound < mcw
    assert rows * bound >= mcw  # every hessian at its bound: a child this small is valid
    fewer = data.draw(st.integers(0, max(0, rows - 1)))
    hess = data.draw(st.lists(st.floats(0.0, bound), min_size=fewer, max_size=fewer))
    assert fewer < msl or math.fsum(hess) < mcw


def test_min_child_rows_for_the_logistic_loss() -> None:
    """Hessians of the logistic loss are at most 1/4: XGBoost's default needs 4 rows."""
    assert min_child_rows(1, 1.0, -2) == 4
    assert min_child_rows(10, 1.0, -2) == 10
    assert min_child_rows(1, 0.0, -2) == 1
    assert min_child_rows(1, 1.0, -1100) == 1 << 62  # vanishing hessians: no child is valid
