"""Population stability index (PSI) of features and scores between two samples.

Why: a deployed credit model is monitored by comparing the population it scores now with the
one it was trained on; the PSI over fixed bins is the statistic model-risk teams read, with
well-known bands. Like :mod:`~p2pboost.gbdt.woe`, it starts from **counts per bin**, so each
party computes its own features' counts on its own side (with the model's bins) and no row
leaves it; the guest does the same for the scores.

For bins ``b`` with proportions ``e[b]`` (expected: the training sample) and ``a[b]``
(actual: the new batch)::

    PSI = sum_b (a[b] - e[b]) * ln(a[b] / e[b])

Bands (:func:`band`): below 0.1 **stable**, 0.1 to 0.25 **watch**, above 0.25 **shift**.

Empty bins: a proportion of 0 would make the log infinite, so a bin empty in one sample has its
proportion there taken as :data:`EPSILON` (1e-4, the floor most monitoring tools use; the
other proportions are not renormalised, so the result is exactly the formula with that one
substitution). A bin empty in both samples adds 0.

Bins: a feature's are the model's (:class:`~p2pboost.gbdt.binning.BinMapper`: the training
edges, the missing bin as its own bin, so a rise of missing values shows); the scores' are
cut at the training scores' quantiles (:func:`score_edges`, deciles by default), with the
same rule as feature bins (a score ``s`` is in bin ``#{e in edges : e < s}``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.features import Features

__all__ = [
    "EPSILON",
    "SHIFT",
    "STABLE",
    "band",
    "feature_counts",
    "psi",
    "score_counts",
    "score_edges",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: The proportion an empty bin is taken to have in the sample where it is empty.
EPSILON = 1e-4
#: Upper end of the "stable" band and lower end of the "shift" band.
STABLE = 0.1
SHIFT = 0.25


def psi(expected: Any, actual: Any, *, epsilon: float = EPSILON) -> F64:
    """PSI of counts per bin (last axis; one PSI per index of the leading axes, so a
    ``(features, bins)`` pair gives ``(features,)``, and 1-D counts a 0-d array)."""
    e = _counts(expected, "expected")
    a = _counts(actual, "actual")
    if e.shape != a.shape or e.ndim == 0:
        raise InputError("expected and actual counts must have the same shape")
    if not (isinstance(epsilon, int | float) and 0 < epsilon < 1):
        raise InputError(f"epsilon must be in (0, 1), got {epsilon!r}")
    n_e = e.sum(axis=-1, keepdims=True)
    n_a = a.sum(axis=-1, keepdims=True)
    if np.any(n_e == 0) or np.any(n_a == 0):
        raise InputError("both samples need at least one row")
    pe = np.where(e == 0, epsilon, e / n_e)
    pa = np.where(a == 0, epsilon, a / n_a)
    return np.asarray(np.sum((pa - pe) * np.log(pa / pe), axis=-1))


def band(value: float) -> Literal["stable", "watch", "shift"]:
    """The usual reading of a PSI: ``"stable"`` (< 0.1), ``"watch"`` (0.1 to 0.25) or
    ``"shift"`` (> 0.25)."""
    if value < STABLE:
        return "stable"
    return "watch" if value <= SHIFT else "shift"


def feature_counts(mapper: BinMapper, X: Features | npt.NDArray[Any]) -> I64:
    """Rows per bin ``(features, mapper.n_slots)`` of raw rows ``X`` in the model's bins
    (NaN in the missing bin, the last slot): what a party keeps of its training rows and
    computes for each new batch."""
    data = mapper.transform(X)
    out = np.zeros((data.n_features, data.n_slots), dtype=np.int64)
    for f in range(data.n_features):
        out[f] = np.bincount(data.codes[f].astype(np.int64), minlength=data.n_slots)
    return out


def score_edges(scores: Any, n_bins: int = 10) -> F64:
    """Cut points of the training scores at the quantiles ``k / n_bins`` (numpy's linear
    interpolation); repeated cuts (many equal scores) are merged, so fewer bins may remain."""
    s = _scores(scores)
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 2:
        raise InputError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    cuts = np.quantile(s, np.arange(1, n_bins) / n_bins)
    return np.asarray(np.unique(cuts), dtype=np.float64)


def score_counts(scores: Any, edges: Any) -> I64:
    """Scores per bin ``(len(edges) + 1,)``: score ``s`` in bin ``#{e in edges : e < s}``."""
    s = _scores(scores)
    cuts = np.asarray(edges, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) <= 0):
        raise InputError("score edges must be finite and increasing")
    codes = np.searchsorted(cuts, s, side="left")
    return np.bincount(codes, minlength=cuts.size + 1).astype(np.int64)


def _counts(values: Any, name: str) -> F64:
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InputError(f"{name} counts must be finite and non-negative")
    return arr


def _scores(scores: Any) -> F64:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size == 0 or not np.all(np.isfinite(s)):
        raise InputError("scores must be finite and non-empty")
    return s
