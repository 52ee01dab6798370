"""Exact path-dependent TreeSHAP: per-player contributions of each row's margin.

Why: model-risk review asks for the reasons behind each score (an adverse-action notice names
the features that drove it), and the Shapley values of Lundberg et al.'s path-dependent
TreeSHAP (Algorithm 2 of "Consistent individualized feature attribution for tree ensembles",
the algorithm of XGBoost's ``pred_contribs``) are the accepted answer: they are exact, they
add up to the margin, and they are what XGBoost prints for the same trees.

The value of a coalition ``S`` of players for one row is the tree's *path-dependent*
conditional expectation: walk the tree from the root; at a split whose player is in ``S``
follow the row's decision, at any other split take both children weighted by their share of
the node's cover (sum of hessians of the training rows, as XGBoost's ``sum_hess``). The
contributions are the Shapley values of that game, the last column the empty coalition's value
(the expected margin, base margin included), so every row's contributions sum to its margin.

Two choices make one routine serve every party:

* **decisions, not values.** A tree is walked with ``go_left[node, row]`` for every internal
  node (:meth:`~p2pboost.gbdt.tree.Tree.leaves`' input), not with feature values. The core
  computes them from raw rows (:meth:`~p2pboost.gbdt.tree.Tree.local_decisions_raw`); the
  vertical guest fills the host-owned nodes with the bits of one-round inference and uses its
  own covers, so it explains a model whose host thresholds it never sees.
* **players, not features.** Each internal node names the player of its split
  (``players[node]``). Per-feature values use the split feature; grouped values map several
  features to one player (all of a host's features, say), and the algorithm's unwind step,
  which already handles a feature met twice on a path, gives the exact Shapley values of the
  groups as players. Grouped values are not sums of per-feature ones (the game differs), so
  they are computed, never derived.

Vectorised per (tree, leaf path) over rows: every row visits every node of a tree (the hot
child with the row, the cold one without it), so the unique path at a leaf (its distinct
players and their zero fractions) depends on the tree only; a row changes just the "one
fractions" (did it take every edge of that player?), 0 or 1 each. With ``m`` players on a path
there are ``2**m`` patterns: a leaf's weights are computed once per pattern, for all leaves of
a tree at once, and each row looks its pattern up (:class:`_LeafPaths`). Deep paths with more
patterns than rows get their weights per row instead, by the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.tree import Tree

__all__ = [
    "booster_contributions",
    "ensemble_contributions",
    "expected_value",
    "feature_players",
    "reason_codes",
    "tree_contributions",
]

F64 = npt.NDArray[np.float64]
#: Rows per block are chosen so a block's (slots x leaves x outputs x rows) shares stay
#: about this many floats (32 MB), whatever the depth.
_CHUNK_ELEMENTS = 4_000_000
#: Distinct players on one path at most: a row's pattern of followed slots is an int64's bits.
_MAX_SLOTS = 62
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]


def child_fractions(tree: Tree) -> tuple[F64, F64]:
    """Each internal node's children's shares of its cover, ``(left, right)`` per node.

    XGBoost's: a child's cover over its parent's. A node without cover (possible only with
    ``min_child_weight=0``) splits its weight evenly, so no division by zero can arise.
    """
    cover = tree.cover
    internal = tree.internal
    lk = np.where(internal, tree.left, 0)
    rk = np.where(internal, tree.right, 0)
    parent = np.where(cover != 0, cover, 1.0)
    left = np.where(cover != 0, cover[lk] / parent, 0.5)
    right = np.where(cover != 0, cover[rk] / parent, 0.5)
    return np.where(internal, left, 0.0), np.where(internal, right, 0.0)


def expected_value(tree: Tree) -> F64:
    """The tree's output ``(K,)`` averaged over its leaves with the cover fractions: the value
    of the empty coalition (XGBoost's node mean value of the root)."""
    left, right = child_fractions(tree)
    internal = tree.internal
    order, stack = [], [0]
    while stack:  # pre-order from the root: a parent before its children, whatever the ids
        nd = stack.pop()
        if internal[nd]:
            order.append(nd)
            stack.extend((int(tree.left[nd]), int(tree.right[nd])))
    mean = tree.value.copy()
    for nd in reversed(order):
        mean[nd] = left[nd] * mean[tree.left[nd]] + right[nd] * mean[tree.right[nd]]
    return np.asarray(mean[0])


def feature_players(tree: Tree, groups: I64 | None = None) -> I64:
    """``players[node]`` of a tree's local splits: the feature, or ``groups[feature]`` (a
    player id per feature) for grouped Shapley values; -1 at leaves."""
    feature = np.where(tree.internal, tree.feature, -1)
    if np.any(feature[tree.internal] < 0):
        raise InputError("feature_players takes trees of local splits (the caller maps others)")
    if groups is None:
        return feature
    groups = np.asarray(groups, dtype=np.int64)
    return np.where(tree.internal, groups[np.maximum(feature, 0)], -1)


def tree_contributions(tree: Tree, go_left: B8, players: I64, n_players: int) -> F64:
    """Contributions ``(n_rows, n_players + 1, K)`` of one tree: Shapley values of each player
    for each row, then the tree's expected value (:func:`expected_value`) as the last column.

    ``go_left[node, row]``: the row's decision at every internal node (rows of leaves are
    ignored); ``players[node]``: the player, in ``[0, n_players)``, of every internal node's
    split. Row ``r``'s contributions sum to the leaf value it reaches.
    """
    go_left = np.asarray(go_left, dtype=np.bool_)
    players = np.asarray(players, dtype=np.int64)
    if go_left.ndim != 2 or go_left.shape[0] != tree.n_nodes:
        raise InputError(f"go_left must have shape ({tree.n_nodes}, n_rows)")
    if players.shape != (tree.n_nodes,):
        raise InputError(f"players must have one entry per node ({tree.n_nodes})")
    inner = players[tree.internal]
    if inner.size and (inner.min() < 0 or inner.max() >= n_players):
        raise InputError(f"players must be in [0, {n_players}) at every split")
    n_rows = go_left.shape[1]
    # Player-major while accumulating, so each update writes contiguous rows.
    phi = np.zeros((n_players + 1, tree.n_outputs, n_rows))
    phi[n_players] = expected_value(tree)[:, None]
    paths = _LeafPaths.of(tree, players)
    if paths.n_slots:
        chunk = max(1, _CHUNK_ELEMENTS // (paths.n_slots * paths.n_leaves * tree.n_outputs))
        # Few distinct players per path: weigh every pattern of "followed" slots once, then
        # look each row's pattern up (2**m columns instead of one per row).
        table = paths.pattern_weights() if 2**paths.n_slots <= min(chunk, n_rows) else None
        for lo in range(0, n_rows, chunk):
            hi = min(lo + chunk, n_rows)
            paths.add(phi[:, :, lo:hi], go_left[:, lo:hi], table)
    return np.ascontiguousarray(phi.transpose(2, 0, 1))


def ensemble_contributions(
    trees: Sequence[Tree],
    tree_output: Sequence[int],
    base_margin: F64,
    decisions: Callable[[int, Tree], B8],
    players: Callable[[int, Tree], I64],
    n_players: int,
) -> F64:
    """Contributions of a forest, in XGBoost's ``pred_contribs`` layout: ``(n_rows,
    n_players + 1)`` for one output, ``(n_rows, K, n_players + 1)`` for ``K``; the last column
    is the base margin plus every tree's expected value, and each row sums to its margin.

    ``decisions(i, tree)`` gives tree ``i``'s ``go_left`` matrix, ``players(i, tree)`` its
    player per node (callables, so a caller builds one tree's matrices at a time).
    ``tree_output[i]`` is the output tree ``i`` adds to, or -1 for vector leaves.
    """
    base = np.asarray(base_margin, dtype=np.float64).reshape(-1)
    k = base.size
    out: F64 | None = None
    for i, (tree, target) in enumerate(zip(trees, tree_output, strict=True)):
        phi = tree_contributions(tree, decisions(i, tree), players(i, tree), n_players)
        if out is None:
            out = np.zeros((phi.shape[0], k, n_players + 1))
        if target < 0:
            out += phi.transpose(0, 2, 1)
        else:
            out[:, target, :] += phi[:, :, 0]
    if out is None:
        raise InputError("no trees to explain; the contributions need the number of rows")
    out[:, :, n_players] += base
    return out[:, 0, :] if k == 1 else out


def booster_contributions(
    booster: Booster, X: Any, *, groups: Any = None, n_rounds: int | None = None
) -> F64:
    """Exact TreeSHAP contributions of a core (or horizontal) model on raw rows ``X``.

    Per feature by default (equal to XGBoost's ``pred_contribs`` on the
    :func:`~p2pboost.gbdt.export.to_xgboost` export); ``groups`` (one player id per feature,
    ``0..G-1``) gives the exact Shapley values of the groups as players instead. The layout is
    :func:`ensemble_contributions`'; ``n_rounds`` as in
    :meth:`~p2pboost.gbdt.booster.Booster.predict_margin`.
    """
    arr = Features.from_user(
        X, categories=booster.categories, order=booster.feature_names, n_features=booster.n_features
    ).dense()
    if n_rounds is None:
        used = booster.n_rounds if booster.best_iteration is None else booster.best_iteration + 1
    else:
        used = n_rounds
    if not 0 <= used <= booster.n_rounds:
        raise InputError(f"n_rounds must be in [0, {booster.n_rounds}], got {used}")
    g: I64 | None = None
    n_players = booster.n_features
    if groups is not None:
        g = np.asarray(groups, dtype=np.int64).reshape(-1)
        if g.size != booster.n_features or (g.size and g.min() < 0):
            raise InputError("groups must give a player id >= 0 for every feature")
        n_players = int(g.max()) + 1 if g.size else 0
    count = used * booster.trees_per_round
    trees = booster.trees[:count]
    if any(tree.n_nodes > 1 and not tree.cover[0] > 0 for tree in trees):
        # Path-dependent TreeSHAP weighs each branch by its share of the parent's cover; a
        # copy shared without statistics (an export, a horizontal client's model) has zeros
        # there, and the values would be silently wrong.
        raise InputError(
            "this model carries no covers (a copy shared without statistics), and TreeSHAP "
            "needs them: explain with the owner's model, or share statistics "
            "(share_statistics on the horizontal server, --with-statistics on export)"
        )
    if not trees:
        base = np.zeros((arr.shape[0], booster.n_outputs, n_players + 1))
        base[:, :, n_players] = booster.base_margin
        return base[:, 0, :] if booster.n_outputs == 1 else base
    return ensemble_contributions(
        trees,
        booster.tree_output[:count],
        booster.base_margin,
        lambda _i, tree: tree.local_decisions_raw(arr),
        lambda _i, tree: feature_players(tree, g),
        n_players,
    )


def reason_codes(
    contributions: F64,
    k: int,
    *,
    direction: Literal["increase", "decrease"] = "increase",
) -> tuple[I64, F64]:
    """The ``k`` players that moved each row's margin most in ``direction``: ``(players,
    values)``, each ``(n_rows, k)``, strongest first.

    ``contributions`` is a single-output layout ``(n_rows, n_players + 1)`` (the last column,
    the base value, is never a reason). ``"increase"`` ranks the largest positive values: for a
    model whose margin is the log-odds of default (label 1 = bad), those are the adverse
    reasons an adverse-action notice lists. ``"decrease"`` ranks the most negative (the
    reasons for a margin that goes down, e.g. a model scoring the good outcome). Players that
    did not move the margin in that direction are reported as -1 with value 0, so a row is
    never given a reason that argued the other way.
    """
    c = np.asarray(contributions, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] < 2:
        raise InputError("reason_codes takes (n_rows, n_players + 1) contributions")
    if direction not in ("increase", "decrease"):
        raise InputError(f"direction must be 'increase' or 'decrease', got {direction!r}")
    phi = c[:, :-1] if direction == "increase" else -c[:, :-1]
    k = min(int(k), phi.shape[1])
    if k < 1:
        raise InputError("k must be at least 1")
    # A stable sort on the negated values: ties keep the lower player id first.
    order = np.argsort(-phi, axis=1, kind="stable")[:, :k]
    strength = np.take_along_axis(phi, order, axis=1)
    keep = strength > 0
    players = np.where(keep, order, -1).astype(np.int64)
    values = np.where(keep, np.take_along_axis(c[:, :-1], order, axis=1), 0.0)
    return players, values


class _LeafPaths:
    """Every leaf's root path, reduced to Algorithm 2's unique path at that leaf.

    A player met several times on a path is one slot: its zero fraction is the product of the
    cover fractions of its edges, and a row "follows" it (one fraction 1) when it takes every
    one of those edges. This is what the algorithm's UNWIND-then-EXTEND computes, since the
    path weights are symmetric in the slots (EXTEND commutes and UNWIND inverts it); taking
    it directly needs no division. Paths are padded to ``n_slots`` with null players (zero and
    one fractions 1), which change no Shapley value.

    ``edge_node``, ``edge_left``, ``edge_slot`` ``(leaves, depth)``: the nodes on each path,
    the direction taken, and the slot they belong to (-1 past the path's end).
    """

    __slots__ = (
        "edge_left",
        "edge_node",
        "edge_slot",
        "n_leaves",
        "n_slots",
        "slot_player",
        "value",
        "zero",
    )

    def __init__(
        self,
        slot_player: I64,
        zero: F64,
        edge_node: I64,
        edge_left: B8,
        edge_slot: I64,
        value: F64,
    ) -> None:
        self.slot_player = slot_player
        self.zero = zero
        self.edge_node = edge_node
        self.edge_left = edge_left
        self.edge_slot = edge_slot
        self.value = value
        self.n_leaves, self.n_slots = slot_player.shape

    @classmethod
    def of(cls, tree: Tree, players: I64) -> _LeafPaths:
        left_share, right_share = child_fractions(tree)
        leaves: list[tuple[int, list[tuple[int, bool]]]] = []
        stack: list[tuple[int, list[tuple[int, bool]]]] = [(0, [])]
        internal = tree.internal
        while stack:
            node, edges = stack.pop()
            if internal[node]:
                stack.append((int(tree.right[node]), [*edges, (node, False)]))
                stack.append((int(tree.left[node]), [*edges, (node, True)]))
            else:
                leaves.append((node, edges))
        depth = max(len(e) for _, e in leaves)
        per_leaf = []
        for _, edges in leaves:
            order: dict[int, int] = {}
            for node, _ in edges:
                order.setdefault(int(players[node]), len(order))
            per_leaf.append(order)
        m = max(len(o) for o in per_leaf)
        if m > _MAX_SLOTS:  # only a hand-made tree: training caps max_depth at 30
            raise InputError(f"a path with {m} distinct players (at most {_MAX_SLOTS})")
        n = len(leaves)
        slot_player = np.full((n, m), -1, dtype=np.int64)
        zero = np.ones((n, m))
        edge_node = np.zeros((n, depth), dtype=np.int64)
        edge_left = np.zeros((n, depth), dtype=np.bool_)
        edge_slot = np.full((n, depth), -1, dtype=np.int64)
        for li, ((_, edges), order) in enumerate(zip(leaves, per_leaf, strict=True)):
            for p, j in order.items():
                slot_player[li, j] = p
            for t, (node, went_left) in enumerate(edges):
                j = order[int(players[node])]
                zero[li, j] *= left_share[node] if went_left else right_share[node]
                edge_node[li, t], edge_left[li, t], edge_slot[li, t] = node, went_left, j
        value = np.asarray(tree.value[[leaf for leaf, _ in leaves]])
        return cls(slot_player, zero, edge_node, edge_left, edge_slot, value)

    def followed(self, go_left: B8) -> npt.NDArray[np.int64]:
        """``(leaves, rows)``: bit ``j`` set when the row takes every edge of slot ``j``."""
        dtype = np.uint8 if self.n_slots <= 8 else np.int64
        failed = np.zeros((self.n_leaves, go_left.shape[1]), dtype=dtype)
        for t in range(self.edge_node.shape[1]):
            slot = self.edge_slot[:, t]
            bit = np.where(slot >= 0, 1 << np.maximum(slot, 0), 0).astype(dtype)[:, None]
            failed |= (go_left[self.edge_node[:, t]] != self.edge_left[:, t][:, None]) * bit
        return np.asarray(((1 << self.n_slots) - 1) & ~failed.astype(np.int64))

    def pattern_weights(self) -> F64:
        """Slot weights ``(slots, leaves, 2**slots)`` for every pattern of followed slots."""
        patterns = np.arange(2**self.n_slots, dtype=np.int64)
        bits = (patterns[None, :] >> np.arange(self.n_slots)[:, None]) & 1
        one = np.broadcast_to(bits[:, None, :], (self.n_slots, self.n_leaves, patterns.size))
        return _slot_weights(self.zero.T[:, :, None], one.astype(np.float64))

    def add(self, phi: F64, go_left: B8, table: F64 | None) -> None:
        """Add the leaves' shares to ``phi`` ``(players + 1, K, rows)`` for these rows."""
        codes = self.followed(go_left)
        # The (slot, leaf) pairs of real players, ordered by player, so that one reduction
        # sums each player's shares.
        players = self.slot_player.T.reshape(-1)
        real = np.flatnonzero(players >= 0)
        order = real[np.argsort(players[real], kind="stable")]
        if order.size == 0:
            return
        slot_of, leaf_of = np.divmod(order, self.n_leaves)
        value = self.value[leaf_of]
        if table is not None and value.shape[1] == 1:
            # One output: the leaf values go into the table, and a gather gives the shares.
            n_patterns = table.shape[2]
            flat = (table[slot_of, leaf_of] * value).reshape(-1)
            index = codes[leaf_of] + (np.arange(order.size) * n_patterns)[:, None]
            shares = flat[index][:, None, :]
        else:
            if table is not None:
                w = np.take_along_axis(table[slot_of, leaf_of], codes[leaf_of], axis=1)
            else:
                bits = (codes[None, :, :] >> np.arange(self.n_slots)[:, None, None]) & 1
                w = _slot_weights(self.zero.T[:, :, None], bits.astype(np.float64))
                w = w[slot_of, leaf_of]
            shares = w[:, None, :] * value[:, :, None]
        sorted_players = players[order]
        starts = np.flatnonzero(np.r_[True, sorted_players[1:] != sorted_players[:-1]])
        phi[sorted_players[starts]] += np.add.reduceat(shares, starts, axis=0)


def _slot_weights(zero: F64, one: F64) -> F64:
    """Algorithm 2's leaf weights of every slot, ``(m, ...)``: EXTEND the root's null slot and
    the ``m`` slots (``zero`` broadcast against ``one``, both ``(m, ...)``), then each slot's
    UNWOUNDPATHSUM times ``one - zero``.

    One fractions are 0 or 1, so XGBoost's division by the one fraction is a division by 1
    and left out; a zero fraction of 0 (a cold child without cover) gives the cold branch
    weight 0, as XGBoost's check demands.
    """
    m = one.shape[0]
    shape = one.shape[1:]
    w = np.zeros((m + 1, *shape))
    w[0] = 1.0
    for k in range(1, m + 1):
        z, o = zero[k - 1], one[k - 1]
        for i in range(k - 1, -1, -1):
            w[i + 1] += o * w[i] * ((i + 1) / (k + 1))
            w[i] = z * w[i] * ((k - i) / (k + 1))
    zero_b = np.broadcast_to(zero, one.shape)
    has_zero = zero_b != 0
    inv_zero = np.where(has_zero, 1.0 / np.where(has_zero, zero_b, 1.0), 0.0)
    # A cold slot's sum does not depend on the slot but through 1 / zero: computed once.
    cold = np.zeros(shape)
    nxt = np.repeat(w[m][None], m, axis=0)
    hot_total = np.zeros_like(nxt)
    for i in range(m - 1, -1, -1):
        cold += w[i] * ((m + 1) / (m - i))
        tmp = nxt * ((m + 1) / (i + 1))
        hot_total += tmp
        nxt = w[i][None] - tmp * (zero_b * ((m - i) / (m + 1)))
    total = np.where(one != 0, hot_total, inv_zero * cold[None])
    return np.asarray(total * (one - zero_b))
