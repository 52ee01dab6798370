"""Evaluation metrics on *predictions* (probabilities or values), with a registry by name.

Binary metrics take ``pred`` of shape ``(n,)`` (probability of class 1); multi-class metrics
take ``(n, K)`` class probabilities; regression metrics take ``(n,)`` values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError

__all__ = [
    "Metric",
    "accuracy",
    "auc",
    "available_metrics",
    "get_metric",
    "gini",
    "ks",
    "leaf_purity",
    "lift",
    "logloss",
    "mae",
    "mlogloss",
    "rmse",
]

F64 = npt.NDArray[np.float64]
_EPS = 1e-15


def _two_classes(name: str, y: F64, pred: F64) -> tuple[npt.NDArray[np.bool_], F64, int, int]:
    """Positives, scores and the two class sizes of a ranking metric (both classes needed)."""
    pos = np.asarray(y, dtype=np.float64) == 1.0
    n_pos = int(pos.sum())
    n_neg = pos.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise InputError(f"{name} needs both classes among the labels")
    return pos, np.asarray(pred, dtype=np.float64), n_pos, n_neg


def auc(y: F64, pred: F64) -> float:
    """Area under the ROC curve (tied scores count one half), from average ranks."""
    pos, pred, n_pos, n_neg = _two_classes("AUC", y, pred)
    _, inverse, counts = np.unique(pred, return_inverse=True, return_counts=True)
    # Average 1-based rank of each group of tied scores.
    ends = np.cumsum(counts)
    avg_rank = ends - (counts - 1) / 2.0
    rank_sum = float(avg_rank[inverse][pos].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def gini(y: F64, pred: F64) -> float:
    """The Gini coefficient of credit scoring, ``2 * AUC - 1`` (the accuracy ratio)."""
    return 2.0 * auc(y, pred) - 1.0


def ks(y: F64, pred: F64) -> float:
    """Kolmogorov-Smirnov statistic of credit scoring: the largest gap between the cumulative
    score distributions of the two classes, ``max |TPR - FPR|`` over every threshold (tied
    scores move together)."""
    pos, pred, n_pos, n_neg = _two_classes("KS", y, pred)
    scores, inverse = np.unique(pred, return_inverse=True)
    tpr = np.cumsum(np.bincount(inverse, weights=pos, minlength=scores.size)) / n_pos
    fpr = np.cumsum(np.bincount(inverse, weights=~pos, minlength=scores.size)) / n_neg
    return float(np.max(np.abs(tpr - fpr)))


def lift(y: F64, pred: F64, share: float) -> float:
    """Lift at ``share`` (credit scoring's top-decile lift at 0.1): the positive rate among the
    ``share`` of rows with the highest scores, over the positive rate of all rows. Rows tied
    at the cut count in proportion (each tied row as the tied group's positive rate), so the
    value does not depend on the rows' order."""
    if not 0.0 < share <= 1.0:
        raise InputError(f"lift needs a share in (0, 1], got {share}")
    pos, pred, n_pos, _ = _two_classes("lift", y, pred)
    n = pos.size
    take = share * n
    scores, inverse = np.unique(-pred, return_inverse=True)  # highest score first
    counts = np.bincount(inverse, minlength=scores.size).astype(np.float64)
    positives = np.bincount(inverse, weights=pos, minlength=scores.size)
    before = np.concatenate([[0.0], np.cumsum(counts)[:-1]])
    used = np.clip(take - before, 0.0, counts)  # how much of each tied group is in the top
    top_positives = float(np.sum(positives * used / counts))
    return (top_positives / take) / (n_pos / n)


def logloss(y: F64, pred: F64) -> float:
    """Mean binary cross-entropy of probabilities ``pred`` (clipped away from 0 and 1)."""
    p = np.clip(np.asarray(pred, dtype=np.float64), _EPS, 1.0 - _EPS)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def mlogloss(y: F64, pred: F64) -> float:
    """Mean multi-class cross-entropy of class probabilities ``pred`` ``(n, K)``."""
    p = np.clip(np.asarray(pred, dtype=np.float64), _EPS, 1.0)
    return float(-np.mean(np.log(p[np.arange(y.size), np.asarray(y, dtype=np.intp)])))


def accuracy(y: F64, pred: F64) -> float:
    """Share of correct labels: argmax of ``(n, K)`` probabilities, or ``p >= 0.5`` if 1-D."""
    p = np.asarray(pred, dtype=np.float64)
    label = p.argmax(axis=1) if p.ndim == 2 else (p >= 0.5).astype(np.float64)
    return float(np.mean(label == y))


def rmse(y: F64, pred: F64) -> float:
    """Root mean squared error."""
    return float(np.sqrt(np.mean((np.asarray(pred, dtype=np.float64) - y) ** 2)))


def mae(y: F64, pred: F64) -> float:
    """Mean absolute error."""
    return float(np.mean(np.abs(np.asarray(pred, dtype=np.float64) - y)))


@dataclass(frozen=True, slots=True)
class Metric:
    """A named metric and whether larger values are better (for early stopping)."""

    name: str
    fn: Callable[[F64, F64], float]
    higher_is_better: bool

    def __call__(self, y: Any, pred: Any) -> float:
        y_arr = np.asarray(y, dtype=np.float64)
        p_arr = np.asarray(pred, dtype=np.float64)
        if p_arr.shape[0] != y_arr.shape[0]:
            raise InputError(f"{self.name}: {y_arr.shape[0]} labels but {p_arr.shape[0]} rows")
        return self.fn(y_arr, p_arr)


_REGISTRY: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("auc", auc, True),
        Metric("gini", gini, True),
        Metric("ks", ks, True),
        Metric("logloss", logloss, False),
        Metric("mlogloss", mlogloss, False),
        Metric("accuracy", accuracy, True),
        Metric("rmse", rmse, False),
        Metric("mae", mae, False),
    )
}


def leaf_purity(y: F64, leaves: npt.NDArray[np.int64], classification: bool) -> float:
    """How much a tree's leaves (``leaves[i]``: row ``i``'s leaf) say about the labels ``y``.

    Classification: the share of rows whose leaf's majority class is their own (1 for pure
    leaves; the largest class's share for one leaf). Regression: the share of the labels'
    variance the leaf means explain (R^2 of predicting each row by its leaf's mean label).
    It measures what a party that sees the tree's instance spaces (which rows share a leaf)
    could infer of the labels: the SecureBoost paper's argument for complete_secure.
    """
    y = np.asarray(y, dtype=np.float64)
    leaf, n_leaves = _codes(np.asarray(leaves))
    if classification:
        label, n_labels = _codes(y)
        counts = np.bincount(leaf * n_labels + label, minlength=n_leaves * n_labels)
        return float(counts.reshape(n_leaves, n_labels).max(axis=1).sum() / y.size)
    total = float(np.var(y))
    if total == 0.0:
        return 1.0
    sums = np.bincount(leaf, weights=y, minlength=n_leaves)
    sizes = np.bincount(leaf, minlength=n_leaves)
    means = np.divide(sums, sizes, out=np.zeros(n_leaves), where=sizes > 0)
    within = float(np.mean((y - means[leaf]) ** 2))
    return 1.0 - within / total


def _codes(values: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], int]:
    """Codes ``0 <= c < k`` of ``values`` (equal values, equal codes) and ``k``. Why not
    always ``np.unique``: a tree's leaves and a classifier's labels are integers of a small
    range, where an offset gives codes without sorting (a few ms fewer on 100,000 rows,
    between two trees of a training); codes of absent values in that range stay unused."""
    if values.size:
        low, high = values.min(), values.max()
        whole = np.issubdtype(values.dtype, np.integer) or (
            bool(np.isfinite(low) and np.isfinite(high))
            and bool(np.array_equal(values, np.trunc(values)))
        )
        if whole and int(high) - int(low) < 2 * values.size + 64:  # Python ints: no overflow
            return (values - low).astype(np.int64), int(high) - int(low) + 1
    uniques, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), int(uniques.size)


def available_metrics() -> list[str]:
    return sorted(_REGISTRY)


def get_metric(name: str) -> Metric:
    """The metric called ``name`` (``lift@P``: lift in the top ``P`` percent, e.g. ``lift@10``);
    :class:`InputError` if there is none."""
    if isinstance(name, str) and name.startswith("lift@"):
        try:
            percent = float(name[5:])
        except ValueError:
            percent = float("nan")
        if not 0.0 < percent <= 100.0:
            raise InputError(f"{name!r}: lift@P needs a percentage P in (0, 100], e.g. lift@10")
        return Metric(name, lambda y, p: lift(y, p, percent / 100.0), True)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InputError(
            f"unknown metric {name!r}; choose one of {', '.join(available_metrics())} "
            "or lift@P (the top P percent)"
        ) from None
