"""Layer-wise (depth-wise) tree growth, as separate steps a federated protocol can drive.

One layer is four steps, each a method with plain-array inputs and outputs:

1. :meth:`TreeGrower.find_splits` - best split of every frontier node from its histogram
   (pure math, :func:`~p2pboost.gbdt.split.find_best_splits`);
2. :meth:`TreeGrower.apply_splits` - accept splits whose gain beats ``gamma``, create children;
3. :meth:`TreeGrower.partition` - move rows of split nodes to their children (in a federation
   only the feature's owner can do this; it returns the left set);
4. :meth:`TreeGrower.child_histograms` - build the *smaller* child of each split directly and
   derive its sibling as ``parent - child`` (exact on the fixed-point grid).

:meth:`TreeGrower.grow` runs them in order. Rows are tracked by ``positions`` (the node id of
every row, sampled or not), so at the end ``positions`` gives every training row's leaf.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.gbdt.binning import BinnedData
from p2pboost.gbdt.histogram import Histogram, HistogramBuilder
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.split import MIN_GAIN, LayerSplits, find_best_splits, leaf_weight
from p2pboost.gbdt.tree import Tree, TreeBuilder

__all__ = ["Frontier", "LayerPlan", "TreeGrower", "combine_children", "partition_rows"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
#: ``thresholds(features, bins)``: raw thresholds of splits, vectorised (NaN where unknown).
ThresholdFn = Callable[[I64, I64], F64]


@dataclass(frozen=True, slots=True, eq=False)
class Frontier:
    """The nodes of one layer that may still split, with their histograms and totals."""

    nodes: I64
    hist: Histogram
    grad: F64  # (k, K)
    hess: F64  # (k, K)
    count: I64  # (k,) rows of the sample in each node
    depth: int  # of these nodes (root: 0)


@dataclass(frozen=True, slots=True, eq=False)
class LayerPlan:
    """Accepted splits of a layer: ``nodes[i]`` splits into ``left[i]`` and ``right[i]``.

    ``parent_index[i]`` is the node's position in the frontier; ``*_grad``/``*_hess`` are the
    children's totals.
    """

    nodes: I64
    parent_index: I64
    feature: I64
    threshold_bin: I64
    default_left: B8
    left: I64
    right: I64
    left_grad: F64
    left_hess: F64
    right_grad: F64
    right_hess: F64


def partition_rows(
    data: BinnedData,
    positions: I64,
    nodes: I64,
    feature: I64,
    threshold_bin: I64,
    default_left: B8,
    left: I64,
    right: I64,
    n_nodes: int,
) -> I64:
    """New ``positions`` after splitting ``nodes`` (all rows of those nodes move to a child).

    Branch-free over all rows: nodes that do not split get themselves as both "children".
    """
    if nodes.size == 0:
        return positions
    n = data.n_rows
    # Nodes that do not split this layer: threshold above every code (missing included) so
    # their rows "go left" to a left child that is the node itself.
    lut_off = np.zeros(n_nodes, dtype=np.int64)  # feature * n_rows, flat offset into codes
    lut_t = np.full(n_nodes, data.n_slots, dtype=np.int64)
    lut_d = np.zeros(n_nodes, dtype=np.bool_)
    lut_l = np.arange(n_nodes, dtype=np.int64)
    lut_off[nodes], lut_t[nodes], lut_d[nodes] = feature * n, threshold_bin, default_left
    lut_l[nodes] = left
    b = data.codes.reshape(-1)[lut_off[positions] + np.arange(n)]
    # The missing bin is above every split threshold, so "b <= t" is False for missing rows.
    go_left = b <= lut_t[positions]
    if data.has_missing:
        go_left |= (b == data.missing_bin) & lut_d[positions]
    if np.array_equal(right, left + 1):  # children side by side (as TreeGrower makes them)
        lut_l += 1
        lut_l[nodes] = right
        out = lut_l[positions]
        out -= go_left
        return out
    lut_r = np.arange(n_nodes, dtype=np.int64)
    lut_r[nodes] = right
    return np.asarray(np.where(go_left, lut_l[positions], lut_r[positions]))


class TreeGrower:
    """Grows one tree on bin-coded data from on-grid gradients ``(n, K)``.

    ``sample`` (sorted row indices) are the rows whose gradients build histograms; every row
    is partitioned. ``candidates`` ``(F, max_bin, 2)`` masks allowed split candidates (see
    :func:`~p2pboost.gbdt.split.candidate_mask`). ``thresholds(features, bins)`` gives the raw
    thresholds stored in the tree (NaN where unknown, e.g. another party's feature).
    """

    def __init__(
        self,
        data: BinnedData,
        builder: HistogramBuilder,
        params: BoostParams,
        grad: F64,
        hess: F64,
        sample: I64 | None,
        candidates: B8,
        thresholds: ThresholdFn,
    ) -> None:
        self.data = data
        self.builder = builder
        self.params = params
        self.grad = grad
        self.hess = hess
        self.sample = sample
        self.candidates = candidates
        self.thresholds = thresholds
        self.positions = np.zeros(data.n_rows, dtype=np.int64)
        self.tree = TreeBuilder(n_outputs=grad.shape[1])

    # -- the steps -----------------------------------------------------------------------------

    def root(self) -> Frontier:
        """Create the root and its histogram."""
        rows = self.sample
        hist = self.builder.build(rows, None, 1, self.grad, self.hess)
        g_rows = self.grad if rows is None else self.grad[rows]
        h_rows = self.hess if rows is None else self.hess[rows]
        g = g_rows.sum(axis=0)[None, :]
        h = h_rows.sum(axis=0)[None, :]
        nodes = self._new_nodes(g, h)
        n = self.data.n_rows if rows is None else rows.size
        return Frontier(nodes, hist, g, h, np.array([n], dtype=np.int64), depth=0)

    def find_splits(self, frontier: Frontier) -> LayerSplits:
        """Best candidate split of every frontier node."""
        with_counts = frontier.hist.count is not None
        return find_best_splits(
            frontier.hist,
            frontier.grad,
            frontier.hess,
            frontier.count if with_counts else None,
            self.candidates,
            self.params,
        )

    def apply_splits(self, frontier: Frontier, splits: LayerSplits) -> LayerPlan:
        """Accept splits better than ``gamma``; create both children of each accepted node."""
        accept = np.flatnonzero(splits.gain > max(self.params.gamma, MIN_GAIN))
        lg, lh = splits.left_grad[accept], splits.left_hess[accept]
        rg, rh = frontier.grad[accept] - lg, frontier.hess[accept] - lh
        children = self._new_nodes(_interleave(lg, rg), _interleave(lh, rh))
        left, right = children[0::2], children[1::2]
        if accept.size:
            self.tree.depth = max(self.tree.depth, frontier.depth + 1)
        feature, threshold = splits.feature[accept], splits.threshold[accept]
        self.tree.set_splits(
            frontier.nodes[accept],
            feature,
            threshold,
            self.thresholds(feature, threshold),
            splits.default_left[accept],
            splits.gain[accept],
            left,
            right,
        )
        return LayerPlan(
            nodes=frontier.nodes[accept],
            parent_index=accept,
            feature=splits.feature[accept],
            threshold_bin=splits.threshold[accept],
            default_left=splits.default_left[accept],
            left=left,
            right=right,
            left_grad=lg,
            left_hess=lh,
            right_grad=rg,
            right_hess=rh,
        )

    def partition(self, plan: LayerPlan) -> None:
        """Move the rows of split nodes to their children."""
        self.positions = partition_rows(
            self.data,
            self.positions,
            plan.nodes,
            plan.feature,
            plan.threshold_bin,
            plan.default_left,
            plan.left,
            plan.right,
            self.tree.n_nodes,
        )

    def child_histograms(self, frontier: Frontier, plan: LayerPlan) -> Frontier:
        """Next frontier: smaller children built directly, siblings by subtraction."""
        counts = np.bincount(self._sample_positions(), minlength=self.tree.n_nodes)
        n_left, n_right = counts[plan.left], counts[plan.right]
        left_smaller = n_left <= n_right
        small = self.node_histograms(np.where(left_smaller, plan.left, plan.right))
        hist = combine_children(frontier.hist.take(plan.parent_index), small, left_smaller)
        return Frontier(
            nodes=_interleave(plan.left, plan.right),
            hist=hist,
            grad=_interleave(plan.left_grad, plan.right_grad),
            hess=_interleave(plan.left_hess, plan.right_hess),
            count=_interleave(n_left, n_right).astype(np.int64),
            depth=frontier.depth + 1,
        )

    def node_histograms(self, nodes: I64) -> Histogram:
        """Histograms of ``nodes`` (current node ids), from the sampled rows in them."""
        sample_pos = self._sample_positions()
        slot_of = np.full(self.tree.n_nodes, -1, dtype=np.int64)
        slot_of[nodes] = np.arange(nodes.size)
        slots = slot_of[sample_pos]
        chosen = np.flatnonzero(slots >= 0)
        rows = chosen if self.sample is None else self.sample[chosen]
        return self.builder.build(rows, slots[chosen], nodes.size, self.grad, self.hess)

    def _sample_positions(self) -> I64:
        return self.positions if self.sample is None else self.positions[self.sample]

    # -- driver --------------------------------------------------------------------------------

    def grow(self) -> Tree:
        """Grow the whole tree (up to ``max_depth``) and return it."""
        frontier = self.root()
        while frontier.depth < self.params.max_depth:
            plan = self.apply_splits(frontier, self.find_splits(frontier))
            if plan.nodes.size == 0:
                break
            self.partition(plan)
            if frontier.depth + 1 == self.params.max_depth:
                break  # children are leaves: no histograms needed
            frontier = self.child_histograms(frontier, plan)
        return self.finish()

    def finish(self) -> Tree:
        """The grown tree (the nodes never split are leaves)."""
        return self.tree.finish()

    def _new_nodes(self, g: F64, h: F64) -> I64:
        """Add nodes with totals ``g``/``h`` ``(m, K)``; their values are the leaf weights."""
        p = self.params
        w = leaf_weight(g, h, p.reg_lambda, p.min_child_weight)
        return self.tree.add_nodes(p.learning_rate * w, h.sum(axis=1))


def combine_children(parent: Histogram, small: Histogram, left_smaller: B8) -> Histogram:
    """Children's histograms in node order ``[left0, right0, left1, ...]``.

    ``small[i]`` is the directly built histogram of split ``i``'s smaller child (the left one
    where ``left_smaller[i]``); its sibling is ``parent[i] - small[i]``, exact on the grid.
    """
    k = left_smaller.size
    small_at = 2 * np.arange(k) + (~left_smaller)
    sibling_at = 2 * np.arange(k) + left_smaller

    def place(par: npt.NDArray[Any], sm: npt.NDArray[Any]) -> npt.NDArray[Any]:
        out = np.empty((2 * k, *sm.shape[1:]), dtype=sm.dtype)
        out[small_at] = sm
        out[sibling_at] = par - sm
        return out

    count = None
    if parent.count is not None and small.count is not None:
        count = place(parent.count, small.count)
    return Histogram(place(parent.grad, small.grad), place(parent.hess, small.hess), count)


def _interleave(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``[a0, b0, a1, b1, ...]`` along the first axis (children in node-id order)."""
    out = np.empty((a.shape[0] * 2, *a.shape[1:]), dtype=np.result_type(a, b))
    out[0::2] = a
    out[1::2] = b
    return out
