"""Quantile binning: raw feature values to small integer bin codes, per feature.

Rule (one place, used by training *and* raw-value prediction): feature ``f`` has sorted,
strictly increasing cut points ``edges[f]``; a finite value ``x`` falls in bin
``#{e in edges[f] : e < x}`` (``np.searchsorted(edges, x, side="left")``), so

    bin(x) <= t   <=>   x <= edges[f][t]

and a tree split "bin <= t goes left" is the raw test "x <= edges[f][t]". NaN is *missing*: it
gets its own bin, index ``max_bin`` for every feature (after all value bins), and each split
learns where missing values go. A column with one distinct value (or none) has one value bin and
can never be split on.

Cut points: a feature with at most ``max_bin`` distinct values gets one bin per value, cut at
the midpoints; otherwise cuts sit at the count-weighted quantiles ``k / max_bin`` of the
distinct values (duplicates merged), also at midpoints between neighbouring distinct values.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.features import CscMatrix, Features, check_features, check_matrix, is_sparse
from p2pboost.gbdt.params import MAX_BIN_LIMIT

# check_matrix, check_features and is_sparse moved to p2pboost.gbdt.features; importable here.
__all__ = ["BinMapper", "BinnedData", "check_features", "check_matrix", "is_sparse"]

#: Up to this many cut points, bins are found by comparisons rather than binary search.
_COMPARE_EDGES = 64


@dataclass(frozen=True, slots=True, eq=False)
class BinnedData:
    """Bin codes of a data set, stored feature-major: ``codes[f, i]`` is row ``i``'s bin.

    Feature-major because histograms and partitions read one feature for many rows.
    ``n_slots = max_bin + 1`` is the width of a histogram row (value bins then missing).
    """

    codes: npt.NDArray[np.unsignedinteger[Any]]
    n_slots: int
    #: False only if no code is the missing bin (lets partitions skip the missing test).
    has_missing: bool = True

    @property
    def n_rows(self) -> int:
        return int(self.codes.shape[1])

    @property
    def n_features(self) -> int:
        return int(self.codes.shape[0])

    @property
    def missing_bin(self) -> int:
        return self.n_slots - 1


class BinMapper:
    """Cut points per feature, learnt by :meth:`fit`; maps raw values to bins consistently."""

    def __init__(self, max_bin: int = 32) -> None:
        if isinstance(max_bin, bool) or not isinstance(max_bin, int):
            raise InputError(f"max_bin must be an integer, got {max_bin!r}")
        if not 2 <= max_bin <= MAX_BIN_LIMIT:
            raise InputError(f"max_bin must be in [2, {MAX_BIN_LIMIT}], got {max_bin}")
        self.max_bin = max_bin
        self.edges: list[npt.NDArray[np.float64]] = []
        self._table: npt.NDArray[np.float64] | None = None  # padded edges, for thresholds()
        self._fitted = False  # edges learnt or read (a guest with no features has none)

    # -- learning ----------------------------------------------------------------------------

    def fit(self, X: Features | npt.NDArray[Any]) -> BinMapper:
        """Learn cut points for every column of ``X`` (NaN ignored; sparse features one
        column at a time, the same cuts as their dense form). A bare array is checked first
        (:meth:`Features.from_user`)."""
        features = _features(X)
        if features.is_sparse:  # one column at a time: never the dense matrix
            self.edges = [
                _cuts(features.column(f), self.max_bin) for f in range(features.n_features)
            ]
        else:
            cols = np.ascontiguousarray(features.dense().T)
            self.edges = _each_column(cols, self.max_bin, features.n_rows)
        self._table = None
        self._fitted = True
        return self

    @property
    def n_features(self) -> int:
        return len(self.edges)

    @property
    def n_slots(self) -> int:
        """Histogram width: ``max_bin`` value bins and one missing bin."""
        return self.max_bin + 1

    @property
    def missing_bin(self) -> int:
        return self.max_bin

    @property
    def n_bins(self) -> npt.NDArray[np.int64]:
        """Number of value bins (not counting missing) of each feature."""
        return np.array([e.size + 1 for e in self.edges], dtype=np.int64)

    @property
    def dtype(self) -> type[np.unsignedinteger[Any]]:
        return np.uint8 if self.n_slots <= 256 else np.uint16

    # -- mapping -----------------------------------------------------------------------------

    def transform(self, X: Features | npt.NDArray[Any]) -> BinnedData:
        """Bin codes of ``X`` (feature-major), with NaN mapped to the missing bin."""
        self._require_fitted()
        features = _features(X, self.n_features)
        if not isinstance(features.matrix, np.ndarray):
            return self._transform_sparse(features.matrix)
        cols = np.ascontiguousarray(
            features.matrix.T
        )  # feature-major: each search reads contiguous data
        codes = np.empty(cols.shape, dtype=self.dtype)
        has_missing = False
        for f, edges in enumerate(self.edges):
            codes[f] = _bin_codes(edges, cols[f], self.dtype)
            missing = np.isnan(cols[f])
            if missing.any():
                codes[f, missing] = self.missing_bin
                has_missing = True
        return BinnedData(codes=codes, n_slots=self.n_slots, has_missing=has_missing)

    def _transform_sparse(self, csc: CscMatrix) -> BinnedData:
        """Codes of a CSC matrix: each column filled with the code of 0, then its stored
        entries binned (no dense float matrix)."""
        n_rows, n_feat = csc.shape
        codes = np.empty((n_feat, n_rows), dtype=self.dtype)
        zero = np.zeros(1)
        has_missing = False
        for f, edges in enumerate(self.edges):
            codes[f].fill(_bin_codes(edges, zero, self.dtype)[0])
            lo, hi = csc.indptr[f], csc.indptr[f + 1]
            rows, values = csc.indices[lo:hi], csc.data[lo:hi]
            stored = _bin_codes(edges, values, self.dtype)
            missing = np.isnan(values)
            if missing.any():
                stored[missing] = self.missing_bin
                has_missing = True
            codes[f, rows] = stored
        return BinnedData(codes=codes, n_slots=self.n_slots, has_missing=has_missing)

    def fit_transform(self, X: Features | npt.NDArray[Any]) -> BinnedData:
        features = _features(X)
        return self.fit(features).transform(features)

    def threshold(self, feature: int, bin_: int) -> float:
        """Raw threshold of split "bin <= ``bin_``": rows with ``x <= threshold`` go left."""
        edges = self.edges[feature]
        return float(edges[bin_]) if bin_ < edges.size else float("inf")

    def thresholds(
        self, features: npt.NDArray[np.int64], bins: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """Vectorised :meth:`threshold` (``+inf`` above a feature's last cut)."""
        self._require_fitted()
        if self._table is None or self._table.shape[0] != len(self.edges):
            table = np.full((len(self.edges), self.max_bin), np.inf)
            for f, e in enumerate(self.edges):
                table[f, : e.size] = e
            self._table = table
        return np.asarray(self._table[features, bins])

    # -- persistence -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        self._require_fitted()
        return {"max_bin": self.max_bin, "edges": [e.tolist() for e in self.edges]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BinMapper:
        try:
            mapper = cls(int(data["max_bin"]))
            edges = [np.asarray(e, dtype=np.float64).reshape(-1) for e in data["edges"]]
        except (KeyError, TypeError, ValueError, InputError) as exc:
            raise ModelError(f"invalid bin mapper: {exc}") from None
        for e in edges:
            if e.size >= mapper.max_bin or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
                raise ModelError("invalid bin mapper: edges must be finite and increasing")
        mapper.edges = edges
        mapper._fitted = True
        return mapper

    def _require_fitted(self) -> None:
        if not self._fitted:
            raise InputError("BinMapper is not fitted")


def _features(X: Features | npt.NDArray[Any], n_features: int | None = None) -> Features:
    """``X`` as :class:`Features` (sparse kept sparse; a guest's zero columns allowed)."""
    return Features.from_user(X, n_features=n_features, sparse=True, allow_no_features=True)


def _bin_codes(
    edges: npt.NDArray[np.float64],
    col: npt.NDArray[np.float64],
    dtype: type[np.unsignedinteger[Any]],
) -> npt.NDArray[np.unsignedinteger[Any]]:
    """``#{e in edges : e < x}`` for every ``x`` of ``col`` (NaN gives 0; the caller fixes it).

    Few edges: one vectorised comparison per edge, about 3x faster than ``np.searchsorted``
    (whose binary search mispredicts branches); many edges: ``np.searchsorted``.
    """
    if edges.size > _COMPARE_EDGES:
        return np.searchsorted(edges, col, side="left").astype(dtype)
    codes = np.zeros(col.size, dtype=dtype)
    for e in edges:
        codes += col > e
    return codes


#: Rows from which columns are cut in parallel threads (:func:`_each_column`).
_PARALLEL_ROWS = 100_000

#: Rows :func:`_cuts` looks at first to learn that a column has more than ``max_bin``
#: distinct values (then quantiles are found by selection instead of a full sort).
_PROBE_ROWS = 4096


def _each_column(
    cols: npt.NDArray[np.float64], max_bin: int, n_rows: int
) -> list[npt.NDArray[np.float64]]:
    """:func:`_cuts` of every column, in order; large columns in threads, one per core.

    Why threads: numpy's selection and sorting release the GIL, and binning is what a party
    does before anything else (a host's binning sits between the guest's first message and
    its first histogram), so on a million rows its columns are cut side by side. Small data
    stays on the caller's thread (starting threads would cost more than it saves)."""
    n_cols = len(cols)
    threads = min(n_cols, os.cpu_count() or 1)
    if threads < 2 or n_rows < _PARALLEL_ROWS:
        return [_cuts(col, max_bin) for col in cols]
    with ThreadPoolExecutor(threads, thread_name_prefix="p2pboost-binning") as pool:
        return list(pool.map(_cuts, cols, itertools.repeat(max_bin, n_cols)))


def _cuts(col: npt.NDArray[np.float64], max_bin: int) -> npt.NDArray[np.float64]:
    """Cut points of one column: at most ``max_bin - 1``, strictly increasing, finite.

    The rule is :func:`_cuts_sorted`'s (the module docstring). Why two ways to follow it: a
    column of many distinct values (most numeric features) needs only ``max_bin - 1`` order
    statistics and the next larger value after each, which selection (``np.partition``) finds
    in about a third of a full sort's time: binning a million rows by five features took
    0.55 s, most of a party's set-up before its first encryption. A column of few distinct
    values needs every one of them, so it is sorted. The two give the same cuts bit for bit
    (tests/gbdt/test_binning_cuts.py holds them to it)."""
    values = col[np.isfinite(col)]  # NaN (missing) and infinities carry no cut
    if values.size == 0:
        return np.empty(0, dtype=np.float64)
    if np.unique(values[:_PROBE_ROWS]).size <= max_bin:
        return _cuts_sorted(values, max_bin)  # perhaps few distinct values: count them all
    n = values.size
    # Cut j sits above the distinct value whose cumulative count first reaches n j / max_bin
    # (the targets computed as the sorted rule computes them): the value at sorted position
    # ceil(target) - 1, an order statistic.
    targets = n * np.arange(1, max_bin) / max_bin
    positions = np.unique(np.ceil(targets).astype(np.int64) - 1)
    part = np.partition(values, positions)
    lo = np.unique(part[positions])
    # The next larger value after each: in the stretch after its position, or further on
    # when that stretch holds only copies of it. Positions sorted: each stretch is read at
    # most once per distinct ``lo``.
    bounds = [*positions.tolist(), n - 1]
    hi = np.empty(lo.size, dtype=np.float64)
    keep = np.ones(lo.size, dtype=bool)
    k = 0
    for i, low in enumerate(lo.tolist()):
        while k < positions.size and part[positions[k]] < low:
            k += 1
        found = None
        j = k
        while j < positions.size:
            stretch = part[bounds[j] + 1 : bounds[j + 1] + 1]
            above = stretch[stretch > low]
            if above.size:
                found = float(above.min())
                break
            j += 1
        if found is None:
            keep[i] = False  # the largest value: no cut above it
        else:
            hi[i] = found
    lo, hi = lo[keep], hi[keep]
    mid = lo + (hi - lo) / 2.0
    cuts = np.where(np.isfinite(mid) & (mid < hi), mid, lo)
    return np.ascontiguousarray(cuts, dtype=np.float64)


def _cuts_sorted(values: npt.NDArray[np.float64], max_bin: int) -> npt.NDArray[np.float64]:
    """The cut rule on a full sort of ``values`` (finite): every distinct value and its count."""
    values = np.sort(values)
    first = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    distinct = values[first]
    counts = np.diff(np.append(first, values.size))
    if distinct.size <= max_bin:
        upper_idx = np.arange(distinct.size - 1)
    else:
        cum = np.cumsum(counts)
        targets = cum[-1] * np.arange(1, max_bin) / max_bin
        upper_idx = np.unique(np.searchsorted(cum, targets, side="left"))
        upper_idx = upper_idx[upper_idx < distinct.size - 1]
    lo = distinct[upper_idx]
    hi = distinct[upper_idx + 1]
    mid = lo + (hi - lo) / 2.0
    # The midpoint of two neighbouring floats can round up to ``hi``; then cut at ``lo``.
    cuts = np.where(np.isfinite(mid) & (mid < hi), mid, lo)
    return np.ascontiguousarray(cuts, dtype=np.float64)
