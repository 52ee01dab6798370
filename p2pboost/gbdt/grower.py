"""Layer-wise (depth-wise) tree growth, as a schedule of steps every grower shares.

One layer is four steps. :meth:`HistogramGrower.schedule` is the one place that orders them;
it *yields* each step that needs the outside world and takes the answer back (a sans-I/O
generator, as h11 does for HTTP), so the plaintext core, the vertical guest and the
horizontal server grow trees with the same code and differ only in how they answer:

1. :class:`ChooseSplits` - the best split of every frontier node. **The split-choice hook**:
   the core answers with :meth:`HistogramGrower.find_splits` on its own histograms; the
   vertical guest merges its own best with the hosts' decrypted candidates (and the owners'
   answers) into one :class:`~p2pboost.gbdt.split.LayerSplits` with an owner per node.
2. :meth:`HistogramGrower.apply_splits` (not a hook: always the core's) - accept splits whose
   gain beats ``gamma``, create both children with their leaf weights.
3. :class:`Partition` - move rows of split nodes to their children (in a federation only a
   feature's owner can; it returns the left set).
4. :class:`ChildHistograms` - the next frontier: the *smaller* child of each split built
   directly and its sibling derived as ``parent - child`` (exact on the fixed-point grid), by
   :meth:`HistogramGrower.next_frontier`.

:class:`HistogramGrower` needs no rows (the horizontal server has none: its histograms are
securely aggregated sums). :class:`TreeGrower` adds a party's own rows and answers every step
locally (:meth:`TreeGrower.grow`); ``positions`` then gives every training row's leaf.
Because nothing else creates nodes or orders the steps, a federated tree equals the core's by
construction whenever the answers (sums and choices) are the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinnedData
from p2pboost.gbdt.constraints import FeatureConstraints, TreeConstraints, has_constraints
from p2pboost.gbdt.histogram import Histogram, HistogramBuilder
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import PrivateTree
from p2pboost.gbdt.sampling import sample_from
from p2pboost.gbdt.split import LayerSplits, accepted, find_best_splits, leaf_weight
from p2pboost.gbdt.tree import LOCAL, Tree, TreeBuilder

__all__ = [
    "ChildHistograms",
    "ChooseSplits",
    "DepthMask",
    "Frontier",
    "GrowStep",
    "HistogramGrower",
    "LayerPlan",
    "NodeColumns",
    "Partition",
    "Schedule",
    "TreeGrower",
    "combine_children",
    "drive",
    "drive_async",
    "interleave",
    "partition_rows",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
#: ``thresholds(features, bins)``: raw thresholds of splits, vectorised (NaN where unknown).
ThresholdFn = Callable[[I64, I64], F64]
#: ``features_by_depth(depth)``: the features nodes at that depth may split on (None: all).
DepthMask = Callable[[int], B8 | None]


@dataclass(frozen=True, slots=True, eq=False)
class Frontier:
    """The nodes of one layer that may still split, with their histograms and totals."""

    nodes: I64
    hist: Histogram
    grad: F64  # (k, K)
    hess: F64  # (k, K)
    count: I64  # (k,) rows of the sample in each node
    depth: int  # of these nodes (root: 0)


class NodeColumns:
    """``colsample_bylevel`` and ``colsample_bynode`` (XGBoost's): at each depth a share of
    the tree's features ``tree``, and for each node a share of its depth's, drawn from the round
    loop's generator ``rng`` when the depth's splits are chosen (so every booster that grows
    the same tree with the same generator draws the same). A vertical guest draws a depth's
    masks a step early (:meth:`ahead`), to tell the hosts before they build its packages;
    nothing else draws in between, so the sequence is the core's."""

    def __init__(self, rng: np.random.Generator, tree: B8, bylevel: float, bynode: float) -> None:
        self.rng = rng
        self.tree = tree
        self.bylevel = bylevel
        self.bynode = bynode
        self._ahead: B8 | None = None

    def ahead(self, k: int) -> B8:
        """Draw the next depth's masks now (``draw`` then returns them)."""
        self._ahead = self._draw(k)
        return self._ahead

    def draw(self, k: int) -> B8:
        """The features each of ``k`` nodes of a new depth may split on: ``(k, F)``."""
        masks, self._ahead = self._ahead, None
        if masks is not None:
            if masks.shape[0] != k:
                raise ValueError(f"masks were drawn for {masks.shape[0]} nodes, not {k}")
            return masks
        return self._draw(k)

    def _draw(self, k: int) -> B8:
        level = sample_from(self.rng, self.tree, self.bylevel)
        if self.bynode >= 1.0:
            return np.broadcast_to(level, (k, level.size))
        return np.stack([sample_from(self.rng, level, self.bynode) for _ in range(k)])


@dataclass(frozen=True, slots=True, eq=False)
class LayerPlan:
    """Accepted splits of a layer: ``nodes[i]`` splits into ``left[i]`` and ``right[i]``.

    ``parent_index[i]`` is the node's position in the frontier; ``*_grad``/``*_hess`` are the
    children's totals; ``owner[i]`` whose feature the split uses (:data:`LOCAL`: ours, with
    ``feature``/``threshold_bin`` set; another party's: both -1).
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
    owner: I64

    @property
    def local(self) -> B8:
        """Which splits use our own features (we can partition their rows ourselves)."""
        return np.asarray(self.owner == LOCAL)


# -- the steps a schedule yields ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class ChooseSplits:
    """Answer with the :class:`LayerSplits` of ``frontier`` (the split-choice hook)."""

    frontier: Frontier


@dataclass(frozen=True, slots=True, eq=False)
class Partition:
    """Move the rows of ``plan``'s nodes to their children; answer ``None``.

    ``grow`` says whether another layer follows (a federation tells its peers).
    """

    frontier: Frontier
    plan: LayerPlan
    grow: bool


@dataclass(frozen=True, slots=True, eq=False)
class ChildHistograms:
    """Answer with the next :class:`Frontier` (see :meth:`HistogramGrower.next_frontier`)."""

    frontier: Frontier
    plan: LayerPlan


GrowStep = ChooseSplits | Partition | ChildHistograms
#: A tree's growth: yields steps, takes their answers, returns the finished tree.
Schedule = Generator[GrowStep, Any, Tree]


def drive(schedule: Schedule, answer: Callable[[GrowStep], Any]) -> Tree:
    """Run ``schedule`` to the end, answering each step with ``answer(step)``."""
    try:
        step = next(schedule)
        while True:
            step = schedule.send(answer(step))
    except StopIteration as done:
        tree: Tree = done.value
        return tree


async def drive_async(schedule: Schedule, answer: Callable[[GrowStep], Awaitable[Any]]) -> Tree:
    """:func:`drive` for answers that talk to peers (``await answer(step)``)."""
    try:
        step = next(schedule)
        while True:
            step = schedule.send(await answer(step))
    except StopIteration as done:
        tree: Tree = done.value
        return tree


# -- growth from histograms ----------------------------------------------------------------------


class HistogramGrower:
    """Grows one tree from histograms someone supplies (see the module docstring).

    ``candidates`` ``(F, max_bin, 2)`` masks allowed split candidates (see
    :func:`~p2pboost.gbdt.split.candidate_mask`); ``thresholds(features, bins)`` gives the raw
    thresholds stored in the tree for local splits.

    ``privacy`` (a differentially private tree, :mod:`~p2pboost.gbdt.privacy`) changes two
    things only: the core's split choice is its exponential mechanism, and the finished tree
    is released with noisy leaves. ``features_by_depth(depth)`` (a mask over the features, or
    None for all) restricts what the nodes of a depth may split on: vertical training's
    layered mode (host features in the top layers, guest features below). ``columns``
    draws ``colsample_bylevel``/``colsample_bynode`` per depth and node.

    ``constraints`` (monotone and interaction constraints resolved against the features,
    :mod:`~p2pboost.gbdt.constraints`) clamp node weights to their bounds, mask candidates that
    break a direction or an interaction group, and pass bounds down at each split; the state
    is :attr:`state` (None without constraints). Parameters that ask for constraints without
    ``constraints`` are refused: a trainer that does not apply them must not drop them.
    """

    def __init__(
        self,
        params: BoostParams,
        n_outputs: int,
        candidates: B8,
        thresholds: ThresholdFn,
        privacy: PrivateTree | None = None,
        features_by_depth: DepthMask | None = None,
        columns: NodeColumns | None = None,
        constraints: FeatureConstraints | None = None,
    ) -> None:
        if constraints is None and has_constraints(
            params.monotone_constraints, params.interaction_constraints
        ):
            raise InputError(
                "this trainer does not apply monotone_constraints or interaction_constraints "
                "yet; train without them"
            )
        self.params = params
        self.candidates = candidates
        self.thresholds = thresholds
        self.privacy = privacy
        self.features_by_depth = features_by_depth
        self.columns = columns
        self.tree = TreeBuilder(n_outputs=n_outputs)
        self._totals: list[tuple[F64, F64]] = []  # (g, h) of the nodes, in id order
        self.state = None if constraints is None else TreeConstraints(constraints)

    def start(self, hist: Histogram, grad: F64, hess: F64, count: I64) -> Frontier:
        """Create the root from its histogram and totals ``(1, K)``; the first frontier."""
        nodes = self._new_nodes(grad, hess)
        return Frontier(nodes, hist, grad, hess, np.asarray(count, dtype=np.int64), depth=0)

    def schedule(self, root: Frontier) -> Schedule:
        """The layers of one tree from ``root`` (see the module docstring)."""
        frontier = root
        max_depth = self.params.max_depth
        while frontier.depth < max_depth:
            splits = yield ChooseSplits(frontier)
            plan = self.apply_splits(frontier, splits)
            grow = plan.nodes.size > 0 and frontier.depth + 1 < max_depth
            yield Partition(frontier, plan, grow)
            if not grow:
                break  # no split, or the children are leaves: no histograms needed
            frontier = yield ChildHistograms(frontier, plan)
        return self.finish()

    def find_splits(self, frontier: Frontier) -> LayerSplits:
        """The core's best candidate split of every frontier node (row counts are used, as
        by the core's builders, only for ``min_samples_leaf > 1``); a private tree's choice
        is its exponential mechanism."""
        candidates = self.candidates_at(frontier.depth)
        if self.columns is not None:  # per node: (k, F, B, 2); a guest's are its first F
            nodes = self.columns.draw(frontier.nodes.size)[:, : candidates.shape[0]]
            candidates = candidates[None] & nodes[:, :, None, None]
        allowed = None if self.state is None else self.state.features(frontier.nodes)
        if allowed is not None:  # interaction constraints: per node, (k, F, B, 2)
            candidates = candidates & allowed[:, : candidates.shape[-3], None, None]
        monotone = None if self.state is None else self.state.nodes(frontier.nodes)
        if monotone is not None:  # a guest's features are the first of the directions
            n_feat = frontier.hist.grad.shape[1]
            monotone = replace(monotone, direction=monotone.direction[:n_feat])
        if self.privacy is not None:
            return self.privacy.find_splits(
                frontier.hist,
                frontier.grad,
                frontier.hess,
                candidates,
                monotone,
                self.params.min_child_weight,
            )
        use_counts = self.params.min_samples_leaf > 1 and frontier.hist.count is not None
        hist = (
            frontier.hist if use_counts else Histogram(frontier.hist.grad, frontier.hist.hess, None)
        )
        return find_best_splits(
            hist,
            frontier.grad,
            frontier.hess,
            frontier.count if use_counts else None,
            candidates,
            self.params,
            monotone,
        )

    def candidates_at(self, depth: int) -> B8:
        """The candidate mask of the nodes at ``depth`` (``features_by_depth`` applied)."""
        mask = None if self.features_by_depth is None else self.features_by_depth(depth)
        return self.candidates if mask is None else self.candidates & mask[:, None, None]

    def apply_splits(self, frontier: Frontier, splits: LayerSplits) -> LayerPlan:
        """Accept splits better than ``gamma``; create both children of each accepted node."""
        accept = accepted(splits.gain, self.params)
        lg, lh = splits.left_grad[accept], splits.left_hess[accept]
        rg, rh = frontier.grad[accept] - lg, frontier.hess[accept] - lh
        feature, threshold = splits.feature[accept], splits.threshold[accept]
        owner = (
            np.full(accept.size, LOCAL, dtype=np.int64)
            if splits.owner is None
            else splits.owner[accept].astype(np.int64)
        )
        local = owner == LOCAL
        # The constraint state's feature of each split (global; -1: unknown to us).
        global_feature = (
            np.where(local, feature, -1)
            if splits.global_feature is None
            else splits.global_feature[accept].astype(np.int64)
        )
        children = self._new_nodes(
            interleave(lg, rg), interleave(lh, rh), frontier.nodes[accept], global_feature
        )
        left, right = children[0::2], children[1::2]
        if accept.size:
            self.tree.depth = max(self.tree.depth, frontier.depth + 1)
        raw = np.full(accept.size, np.nan)
        if local.any():
            raw[local] = self.thresholds(feature[local], threshold[local])
        self.tree.set_splits(
            frontier.nodes[accept],
            np.where(local, feature, -1),
            np.where(local, threshold, -1),
            raw,
            splits.default_left[accept] & local,
            splits.gain[accept],
            left,
            right,
            owner,
        )
        return LayerPlan(
            nodes=frontier.nodes[accept],
            parent_index=accept,
            feature=np.where(local, feature, -1),
            threshold_bin=np.where(local, threshold, -1),
            default_left=splits.default_left[accept] & local,
            left=left,
            right=right,
            left_grad=lg,
            left_hess=lh,
            right_grad=rg,
            right_hess=rh,
            owner=owner,
        )

    def next_frontier(
        self, frontier: Frontier, plan: LayerPlan, small: Histogram, n_left: I64, n_right: I64
    ) -> Frontier:
        """The children of ``plan`` as the next frontier.

        ``small[i]`` is the directly built histogram of split ``i``'s smaller child (the left
        one where ``n_left[i] <= n_right[i]``, the core's tie rule); ``n_left``/``n_right``
        count the sampled rows of the children.
        """
        hist = combine_children(frontier.hist.take(plan.parent_index), small, n_left <= n_right)
        return Frontier(
            nodes=interleave(plan.left, plan.right),
            hist=hist,
            grad=interleave(plan.left_grad, plan.right_grad),
            hess=interleave(plan.left_hess, plan.right_hess),
            count=interleave(n_left, n_right).astype(np.int64),
            depth=frontier.depth + 1,
        )

    def finish(self) -> Tree:
        """The grown tree (the nodes never split are leaves); a private tree as released."""
        tree = self.tree.finish()
        if self.privacy is None:
            return tree
        g = np.concatenate([t[0] for t in self._totals])
        h = np.concatenate([t[1] for t in self._totals])
        return self.privacy.release(tree, g, h, self.params.learning_rate)

    def _new_nodes(
        self, g: F64, h: F64, parents: I64 | None = None, feature: I64 | None = None
    ) -> I64:
        """Add nodes with totals ``g``/``h`` ``(m, K)``; their values are the leaf weights.

        Children (in pairs, left then right) of the split nodes ``parents`` on the global
        ``feature`` of each split (-1: unknown): under constraints their weights are clamped
        to the parent's bounds and their own bounds recorded
        (:meth:`~p2pboost.gbdt.constraints.TreeConstraints.add_nodes`).
        """
        p = self.params
        self._totals.append((g, h))
        if self.state is None:
            w = leaf_weight(g, h, p.reg_lambda, p.min_child_weight)
        else:
            w = self.state.add_nodes(g, h, parents, feature, p.reg_lambda, p.min_child_weight)
        return self.tree.add_nodes(p.learning_rate * w, h.sum(axis=1))


# -- growth on a party's own rows ----------------------------------------------------------------


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
    if np.array_equal(right, left + 1):  # children side by side (as the grower makes them)
        lut_l += 1
        lut_l[nodes] = right
        out = lut_l[positions]
        out -= go_left
        return out
    lut_r = np.arange(n_nodes, dtype=np.int64)
    lut_r[nodes] = right
    return np.asarray(np.where(go_left, lut_l[positions], lut_r[positions]))


class TreeGrower(HistogramGrower):
    """Grows one tree on bin-coded data from on-grid gradients ``(n, K)``.

    ``sample`` (sorted row indices) are the rows whose gradients build histograms; every row
    is partitioned and ``positions`` holds every row's node. The steps of the schedule are
    answered locally by :meth:`grow`; a federation answers some of them itself and calls
    :meth:`root`, :meth:`partition` and :meth:`child_histograms` for its own rows.
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
        privacy: PrivateTree | None = None,
        features_by_depth: DepthMask | None = None,
        columns: NodeColumns | None = None,
        constraints: FeatureConstraints | None = None,
    ) -> None:
        super().__init__(
            params,
            grad.shape[1],
            candidates,
            thresholds,
            privacy,
            features_by_depth,
            columns,
            constraints,
        )
        self.data = data
        self.builder = builder
        self.grad = grad
        self.hess = hess
        self.sample = sample
        self.positions = np.zeros(data.n_rows, dtype=np.int64)

    def root(self) -> Frontier:
        """Create the root from this party's rows: its histogram and totals."""
        rows = self.sample
        hist = self.builder.build(rows, None, 1, self.grad, self.hess)
        g_rows = self.grad if rows is None else self.grad[rows]
        h_rows = self.hess if rows is None else self.hess[rows]
        n = self.data.n_rows if rows is None else rows.size
        return self.start(
            hist,
            g_rows.sum(axis=0)[None, :],
            h_rows.sum(axis=0)[None, :],
            np.array([n], dtype=np.int64),
        )

    def partition(self, plan: LayerPlan) -> None:
        """Move the rows of the *local* split nodes of ``plan`` to their children."""
        local = plan.local
        self.positions = partition_rows(
            self.data,
            self.positions,
            plan.nodes[local],
            plan.feature[local],
            plan.threshold_bin[local],
            plan.default_left[local],
            plan.left[local],
            plan.right[local],
            self.tree.n_nodes,
        )

    def child_histograms(self, frontier: Frontier, plan: LayerPlan) -> Frontier:
        """Next frontier: smaller children built directly, siblings by subtraction."""
        counts = np.bincount(self._sample_positions(), minlength=self.tree.n_nodes)
        n_left, n_right = counts[plan.left], counts[plan.right]
        small = self.node_histograms(np.where(n_left <= n_right, plan.left, plan.right))
        return self.next_frontier(frontier, plan, small, n_left, n_right)

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

    def grow(self) -> Tree:
        """Grow the whole tree (up to ``max_depth``) on this party's rows alone."""
        return drive(self.schedule(self.root()), self._answer)

    def _answer(self, step: GrowStep) -> Any:
        if isinstance(step, ChooseSplits):
            return self.find_splits(step.frontier)
        if isinstance(step, Partition):
            return self.partition(step.plan)
        return self.child_histograms(step.frontier, step.plan)


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


def interleave(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``[a0, b0, a1, b1, ...]`` along the first axis (children in node-id order)."""
    out = np.empty((a.shape[0] * 2, *a.shape[1:]), dtype=np.result_type(a, b))
    out[0::2] = a
    out[1::2] = b
    return out
