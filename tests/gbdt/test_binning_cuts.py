"""Cut points by selection equal the cut points of a full sort, bit for bit.

:func:`p2pboost.gbdt.binning._cuts` finds a many-valued column's quantile cuts with
``np.partition``; :func:`~p2pboost.gbdt.binning._cuts_sorted` is the rule on a full sort and
the reference here. Models, the core's trees and every federated mode depend on the cuts, so
any difference would change trained models.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from p2pboost.gbdt import binning


def _reference(col: npt.NDArray[np.float64], max_bin: int) -> npt.NDArray[np.float64]:
    values = col[np.isfinite(col)]
    if values.size == 0:
        return np.empty(0, dtype=np.float64)
    return binning._cuts_sorted(values, max_bin)


def _same(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    return a.dtype == b.dtype and np.array_equal(a, b)


@settings(max_examples=300, deadline=None)
@given(
    col=hnp.arrays(
        np.float64,
        st.integers(1, 3000),
        elements=st.one_of(
            st.floats(allow_nan=True, allow_infinity=True, width=64),
            st.sampled_from([0.0, -0.0, 1.0, 5e-324, -5e-324, 1e308]),
            st.integers(-50, 50).map(float),
        ),
    ),
    max_bin=st.integers(2, 256),
)
def test_selection_equals_sorting(col: npt.NDArray[np.float64], max_bin: int) -> None:
    assert _same(binning._cuts(col, max_bin), _reference(col, max_bin))


@pytest.mark.parametrize("max_bin", [2, 16, 32, 255])
@pytest.mark.parametrize(
    "make",
    [
        lambda rng, n: rng.normal(size=n),
        lambda rng, n: np.round(rng.exponential(size=n), 2),  # many ties
        lambda rng, n: np.where(rng.random(n) < 0.7, 0.0, rng.normal(size=n)),  # a heavy zero
        lambda rng, n: np.sort(rng.normal(size=n)),  # sorted input
        lambda rng, n: rng.integers(0, 40, size=n).astype(np.float64),  # few values
        lambda rng, n: np.where(rng.random(n) < 0.1, np.nan, rng.lognormal(size=n)),
    ],
)
def test_large_columns(make: object, max_bin: int) -> None:
    rng = np.random.default_rng(max_bin)
    col = make(rng, 50_000)  # type: ignore[operator]
    assert _same(binning._cuts(col, max_bin), _reference(col, max_bin))


def test_many_valued_columns_are_not_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The selection path is the one taken for a numeric column (the sort is the fallback for
    columns that may have few distinct values)."""
    col = np.random.default_rng(0).normal(size=20_000)
    expected = _reference(col, 32)

    def refuse(values: npt.NDArray[np.float64], max_bin: int) -> npt.NDArray[np.float64]:
        raise AssertionError("sorted a many-valued column")

    monkeypatch.setattr(binning, "_cuts_sorted", refuse)
    assert _same(binning._cuts(col, 32), expected)


def test_large_data_is_cut_in_threads_with_the_same_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``_PARALLEL_ROWS`` rows the columns are cut side by side in threads, each exactly
    as on its own, in column order."""
    rng = np.random.default_rng(5)
    X = np.column_stack(
        [rng.normal(size=120_000), rng.integers(0, 9, 120_000), rng.exponential(size=120_000)]
    ).astype(np.float64)
    threads: set[str] = set()
    cuts = binning._cuts

    def spy(col: npt.NDArray[np.float64], max_bin: int) -> npt.NDArray[np.float64]:
        import threading

        threads.add(threading.current_thread().name)
        return cuts(col, max_bin)

    monkeypatch.setattr(binning, "_cuts", spy)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    edges = binning.BinMapper(32).fit(X).edges
    assert any(name.startswith("p2pboost-binning") for name in threads)
    for f in range(X.shape[1]):
        assert _same(edges[f], _reference(X[:, f], 32))
