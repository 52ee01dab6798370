"""The layout of every securely aggregated vector: how a client writes it, how the server
reads the sum.

Secure aggregation (:mod:`p2pboost.crypto.secagg`) sums int64 vectors mod 2**64 and nothing
else, so every statistic the server needs is flattened into one. Writing and reading a layout
live side by side here, so the two roles cannot disagree on an offset:

======== ===================================================== =============================
vector   client writes                                         server reads
======== ===================================================== =============================
stats    rows, label sum (fixed point), ones / class counts    :func:`read_stats`
grid     one-hot of its largest ``|g|``, ``|h|`` binary         :func:`read_grid` (the union's
         exponents, then its rows                              fixed-point grids)
hist     fixed-point grad, hess sums, then row counts, per      :meth:`HistLayout.read`
         (node, feature, bin, output)
eval     summed per-row losses (fixed point), rows; for the     :func:`read_eval`
         rank metrics (auc, ks, gini) the counts of negative
         and of positive rows per probability bin instead
======== ===================================================== =============================

The rank metrics are not sums of per-row values, but they are functions of the two score
distributions, which are: each client counts its validation rows' predicted probabilities in
:data:`RANK_BINS` equal bins of [0, 1], by label, and the server reads AUC (rows sharing a
bin count as ties: the difference to the exact AUC is at most the share of positive-negative
pairs that fall in one bin, 1/4096 wide), KS (the largest gap between the two cumulative
distributions at bin edges) and Gini (2 AUC - 1) off the summed counts. The server learns
the union's two histograms of scores, nothing per client.

Binning counts have their layout (256 child counts per queried key prefix) in one place too:
:class:`~p2pboost.homo._binning.Query` and :func:`~p2pboost.homo._binning.child_counts`
write it, :meth:`~p2pboost.homo._binning.EdgeSearch.feed` reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.gbdt.fixedpoint import Grid, choose_grid, to_fixed
from p2pboost.gbdt.histogram import Histogram
from p2pboost.gbdt.metrics import get_metric
from p2pboost.gbdt.objectives import Objective

__all__ = [
    "EVAL_LENGTH",
    "GRID_LENGTH",
    "RANK_BINS",
    "RANK_METRICS",
    "HistLayout",
    "Stats",
    "announced_grid",
    "eval_length",
    "eval_vector",
    "grid_vector",
    "read_eval",
    "read_grid",
    "read_stats",
    "stats_length",
    "stats_vector",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Fixed-point bits of label sums and validation losses.
STAT_BITS = 24
#: frexp exponents of finite positive doubles lie in [-1073, 1024].
EXP_MIN, EXP_MAX = -1073, 1024
EXP_SLOTS = EXP_MAX - EXP_MIN + 1
#: The gradient-grid vector: a one-hot slot per exponent for g, the same for h, the rows.
GRID_LENGTH = 2 * EXP_SLOTS + 1
#: The evaluation vector: summed losses and rows.
EVAL_LENGTH = 2
#: Metrics computed from aggregated score histograms (binary objectives), and their bins.
RANK_METRICS = ("auc", "ks", "gini")
RANK_BINS = 4096


def eval_length(metric: str) -> int:
    """Entries of the eval vector for ``metric``."""
    return 2 * RANK_BINS if metric in RANK_METRICS else EVAL_LENGTH


# -- stats --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """Summed label statistics: rows, the sum of the labels, and the count of ones (binary)
    or per class (softmax; zeros otherwise)."""

    n_rows: int
    label_sum: float
    label_counts: I64


def stats_length(n_outputs: int) -> int:
    return 2 + n_outputs


def stats_vector(y: F64, objective: Objective) -> I64:
    """A client's rows, label sum and label counts."""
    k = objective.n_outputs
    out = np.zeros(stats_length(k), dtype=np.int64)
    out[0] = y.size
    out[1] = int(to_fixed(np.array([y.sum()]), Grid(STAT_BITS, 0, 1))[0])
    if objective.name == "binary:logistic":
        out[2] = int((y == 1.0).sum())
    elif objective.name == "multi:softmax":
        out[2 : 2 + k] = np.bincount(y.astype(np.intp), minlength=k)
    return out


def read_stats(total: I64) -> Stats:
    return Stats(
        n_rows=int(total[0]),
        label_sum=float(np.ldexp(float(total[1]), -STAT_BITS)),
        label_counts=total[2:].copy(),
    )


# -- the gradients' fixed-point grid ------------------------------------------------------------


def _grid_for(magnitude_bits: int, n_rows: int) -> Grid:
    """The core's grid for values up to ``2**magnitude_bits`` summed over ``n_rows`` rows (a
    private tree may hold none: the core then chooses for one)."""
    return choose_grid(np.array([math.ldexp(0.5, magnitude_bits)]), max(n_rows, 1))


def grid_vector(g: F64, h: F64) -> I64:
    """A one-hot of this client's largest ``|g|`` and ``|h|`` exponents, and its rows.

    The sum tells the server the union's largest exponents (so the union's grid is the core's)
    and rows, and which exponents occur how often, not who holds which. A client may have no
    rows in a tree (a private tree's share of a few rows): then only zeros.
    """
    vec = np.zeros(GRID_LENGTH, dtype=np.int64)
    for j, arr in enumerate((g, h)):
        largest = _largest(arr)
        if largest > 0:
            vec[j * EXP_SLOTS + math.frexp(largest)[1] - EXP_MIN] = 1
    vec[-1] = g.shape[0]
    return vec


def read_grid(total: I64) -> tuple[Grid, Grid]:
    """The union's grids for g and h (the core's for the union's rows and magnitudes)."""
    n_rows = int(total[-1])

    def grid(counts: I64) -> Grid:
        present = np.flatnonzero(counts)
        magnitude = int(present[-1]) + EXP_MIN if present.size else 0
        return _grid_for(magnitude, n_rows)

    return grid(total[:EXP_SLOTS]), grid(total[EXP_SLOTS : 2 * EXP_SLOTS])


def announced_grid(bits: int, magnitude_bits: int, n_rows: int, values: F64) -> Grid:
    """The grid the server announced, checked: it must be the core's for its magnitude, and
    ``values`` (ours) must fit it. ``ValueError`` otherwise (also ``OverflowError`` for
    magnitudes beyond a double's)."""
    grid = Grid(bits, magnitude_bits, n_rows)
    if grid != _grid_for(magnitude_bits, n_rows):
        raise ValueError("inconsistent gradient grid")
    if _largest(values) > math.ldexp(1.0, magnitude_bits):
        raise ValueError("our gradients exceed the announced magnitude")
    return grid


def _largest(values: F64) -> float:
    """The largest ``|value|``; 0 for no values."""
    return max(float(values.max()), -float(values.min())) if values.size else 0.0


# -- histograms ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistLayout:
    """Histograms of some nodes as one vector: grad sums ``(nodes, features, slots, outputs)``
    on the g grid, then hess sums on the h grid, then row counts ``(nodes, features, slots)``.
    """

    n_features: int
    n_slots: int
    n_outputs: int

    def _cells(self, n_nodes: int) -> int:
        return n_nodes * self.n_features * self.n_slots

    def length(self, n_nodes: int) -> int:
        cells = self._cells(n_nodes)
        return 2 * cells * self.n_outputs + cells

    def write(self, hist: Histogram, grid_g: Grid, grid_h: Grid) -> I64:
        """A client's histograms (with row counts) as one vector."""
        assert hist.count is not None
        return np.concatenate(
            [
                to_fixed(hist.grad, grid_g).reshape(-1),
                to_fixed(hist.hess, grid_h).reshape(-1),
                hist.count.reshape(-1),
            ]
        )

    def read(self, total: I64, n_nodes: int, grid_g: Grid, grid_h: Grid) -> Histogram:
        """The summed histograms of ``n_nodes`` nodes."""
        cells, k_out = self._cells(n_nodes), self.n_outputs
        shape = (n_nodes, self.n_features, self.n_slots, k_out)
        g = np.ldexp(total[: cells * k_out].astype(np.float64), -grid_g.bits).reshape(shape)
        h = np.ldexp(total[cells * k_out : 2 * cells * k_out].astype(np.float64), -grid_h.bits)
        cnt = total[2 * cells * k_out :].reshape(n_nodes, self.n_features, self.n_slots)
        return Histogram(g, h.reshape(shape), cnt.copy())


# -- evaluation ---------------------------------------------------------------------------------


def eval_vector(metric: str, evaluation: tuple[F64, F64] | None) -> I64:
    """Summed per-row values of ``metric`` (fixed point; squared errors for rmse) and rows,
    from ``(labels, predictions)`` of this client's validation rows (``None``: it has none)."""
    out = np.zeros(eval_length(metric), dtype=np.int64)
    if evaluation is None:
        return out
    y, pred = evaluation
    if metric in RANK_METRICS:  # negatives' then positives' counts per probability bin
        bins = np.minimum((np.asarray(pred) * RANK_BINS).astype(np.int64), RANK_BINS - 1)
        positive = np.asarray(y) > 0.5
        out[:RANK_BINS] = np.bincount(bins[~positive], minlength=RANK_BINS)
        out[RANK_BINS:] = np.bincount(bins[positive], minlength=RANK_BINS)
        return out
    value = get_metric(metric)(y, pred)
    total = value * value * y.size if metric == "rmse" else value * y.size
    out[0] = int(np.rint(np.ldexp(total, STAT_BITS)))
    out[1] = y.size
    return out


def read_eval(total: I64, metric: str) -> float | None:
    """The metric over the union of the validation rows (``None``: nobody has any, or, for a
    rank metric, the rows hold one class only)."""
    if metric in RANK_METRICS:
        return _rank_metric(total[:RANK_BINS], total[RANK_BINS:], metric)
    if total[1] == 0:
        return None
    mean = float(np.ldexp(float(total[0]), -STAT_BITS)) / float(total[1])
    return math.sqrt(mean) if metric == "rmse" else mean


def _rank_metric(neg: I64, pos: I64, metric: str) -> float | None:
    """AUC (ties within a bin count half), KS or Gini from the two score histograms."""
    n_neg, n_pos = float(neg.sum()), float(pos.sum())
    if n_neg == 0 or n_pos == 0:
        return None
    below = np.concatenate([[0.0], np.cumsum(neg, dtype=np.float64)[:-1]])
    auc = float((pos * (below + 0.5 * neg)).sum() / (n_neg * n_pos))
    if metric == "auc":
        return auc
    if metric == "gini":
        return 2.0 * auc - 1.0
    gap = np.cumsum(neg, dtype=np.float64) / n_neg - np.cumsum(pos, dtype=np.float64) / n_pos
    return float(np.abs(gap).max())
