from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.binning import BinMapper

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
columns = hnp.arrays(np.float64, st.integers(1, 60), elements=finite | st.just(np.nan))


def test_missing_values_get_their_own_bin() -> None:
    X = np.array([[1.0], [np.nan], [3.0], [2.0], [np.nan]])
    mapper = BinMapper(max_bin=8).fit(X)
    data = mapper.transform(X)
    assert data.codes[0].tolist() == [0, 8, 2, 1, 8]
    assert data.missing_bin == 8
    assert data.n_slots == 9
    assert data.has_missing


def test_constant_and_all_missing_columns_have_one_value_bin() -> None:
    X = np.column_stack([np.full(5, 7.0), np.full(5, np.nan), np.arange(5.0)])
    mapper = BinMapper(max_bin=4).fit(X)
    assert mapper.n_bins.tolist() == [1, 1, 4]
    codes = mapper.transform(X).codes
    assert codes[0].tolist() == [0] * 5
    assert codes[1].tolist() == [4] * 5


def test_few_distinct_values_get_one_bin_each() -> None:
    X = np.array([[0.0], [1.0], [1.0], [5.0], [9.0]])
    mapper = BinMapper(max_bin=32).fit(X)
    assert mapper.edges[0].tolist() == [0.5, 3.0, 7.0]
    assert mapper.transform(X).codes[0].tolist() == [0, 1, 1, 2, 3]


def test_quantile_bins_are_balanced() -> None:
    x = np.random.default_rng(0).normal(size=(10_000, 1))
    codes = BinMapper(max_bin=16).fit_transform(x).codes[0]
    counts = np.bincount(codes, minlength=16)[:16]
    assert counts.min() > 0.8 * 10_000 / 16
    assert counts.max() < 1.2 * 10_000 / 16


def test_code_dtype_follows_max_bin() -> None:
    X = np.arange(600.0).reshape(-1, 1)
    assert BinMapper(255).fit_transform(X).codes.dtype == np.uint8
    data = BinMapper(256).fit_transform(X)
    assert data.codes.dtype == np.uint16
    assert int(data.codes.max()) == 255


@pytest.mark.parametrize("max_bin", [1, 300, 2.5, True])
def test_bad_max_bin_raises(max_bin: object) -> None:
    with pytest.raises(InputError, match="max_bin"):
        BinMapper(max_bin)  # type: ignore[arg-type]


@pytest.mark.parametrize("X", [np.zeros((0, 3)), np.zeros(3), [["a", "b"]]], ids=str)
def test_bad_matrices_raise(X: Any) -> None:
    with pytest.raises(InputError):
        BinMapper(8).fit(X)


def test_rows_without_columns_bin_to_nothing_but_the_core_needs_a_feature() -> None:
    """A vertical guest that holds only labels bins no column; training the core on no
    feature stays an error."""
    from p2pboost.gbdt.booster import train
    from p2pboost.gbdt.params import BoostParams

    mapper = BinMapper(8).fit(np.zeros((3, 0)))
    assert mapper.n_features == 0
    assert mapper.transform(np.zeros((3, 0))).n_rows == 3
    with pytest.raises(InputError, match="0 feature"):
        train(BoostParams(n_estimators=1), np.zeros((3, 0)), np.array([0.0, 1.0, 0.0]))


def test_transform_checks_feature_count() -> None:
    mapper = BinMapper(8).fit(np.zeros((4, 2)))
    with pytest.raises(InputError, match="expects 2"):
        mapper.transform(np.zeros((4, 3)))


def test_round_trip_through_dict() -> None:
    X = np.random.default_rng(1).normal(size=(200, 3))
    mapper = BinMapper(16).fit(X)
    again = BinMapper.from_dict(mapper.to_dict())
    assert np.array_equal(again.transform(X).codes, mapper.transform(X).codes)


def test_corrupt_dict_raises_model_error() -> None:
    with pytest.raises(ModelError):
        BinMapper.from_dict({"max_bin": 4, "edges": [[2.0, 1.0]]})
    with pytest.raises(ModelError):
        BinMapper.from_dict({"edges": []})


@settings(max_examples=60, deadline=None)
@given(col=columns, max_bin=st.integers(2, 40))
def test_binning_is_monotone_and_matches_raw_thresholds(col: np.ndarray, max_bin: int) -> None:
    """bin(x) is non-decreasing in x, and bin(x) <= t exactly when x <= threshold(t)."""
    mapper = BinMapper(max_bin).fit(col[:, None])
    codes = mapper.transform(col[:, None]).codes[0].astype(np.int64)
    present = ~np.isnan(col)
    assert np.all(codes[~present] == max_bin)
    order = np.argsort(col[present], kind="stable")
    assert np.all(np.diff(codes[present][order]) >= 0)
    assert codes[present].max(initial=0) < mapper.n_bins[0]
    for t in range(int(mapper.n_bins[0])):
        thr = mapper.threshold(0, t)
        assert np.array_equal(codes[present] <= t, col[present] <= thr)
    # Distinct values never exceed max_bin bins, and with few values each gets its own.
    n_distinct = np.unique(col[present]).size
    if 0 < n_distinct <= max_bin:
        assert mapper.n_bins[0] == n_distinct
