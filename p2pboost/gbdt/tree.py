"""A regression tree stored as flat arrays, with prediction on bin codes or raw values.

Node ``i`` is a leaf when ``owner[i] == LEAF``; otherwise rows with
``bin <= threshold_bin[i]`` (raw: ``x <= threshold[i]``) go to ``left[i]``, missing values go
left iff ``default_left[i]``, and the rest go to ``right[i]``. ``value[i]`` is the leaf's
output vector (length ``K``; one for scalar trees), already multiplied by the learning rate.

``owner[i]`` says whose feature a split uses: :data:`LOCAL` (0) for this party's (every split
of a tree the plaintext core grows), ``k >= 1`` for the ``k``-th other party of a federation.
The vertical guest's trees are these same trees with host-owned splits: for those the guest
knows the structure, gain and cover but not the feature or threshold (``feature`` -1,
``threshold`` NaN), so they can only be walked with the owner's decisions
(:meth:`Tree.leaves`). The owners default to "local split where ``feature >= 0``", so a core
tree never spells them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import ModelError
from p2pboost.gbdt.binning import BinnedData

__all__ = ["LEAF", "LOCAL", "Tree", "TreeBuilder"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: ``Tree.owner`` of a leaf, and of a split on this party's own feature.
LEAF = -1
LOCAL = 0


@dataclass(frozen=True, slots=True, eq=False)
class Tree:
    """Immutable tree arrays (see the module docstring)."""

    feature: I64
    threshold_bin: I64
    threshold: F64
    default_left: B8
    left: I64
    right: I64
    value: F64
    gain: F64
    cover: F64
    depth: int
    #: Omitted (empty): local splits where ``feature >= 0``, derived on construction.
    owner: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if self.owner.size == 0 and self.feature.size:
            owner = np.where(self.feature >= 0, LOCAL, LEAF).astype(np.int64)
            object.__setattr__(self, "owner", owner)

    @property
    def n_nodes(self) -> int:
        return int(self.feature.size)

    @property
    def n_outputs(self) -> int:
        return int(self.value.shape[1])

    @property
    def is_leaf(self) -> B8:
        return np.asarray(self.owner == LEAF)

    @property
    def internal(self) -> B8:
        return np.asarray(self.owner != LEAF)

    @property
    def is_local(self) -> bool:
        """Every split uses this party's features (the tree can be walked on its own)."""
        return not bool(np.any(self.owner > LOCAL))

    def leaves(self, go_left: B8) -> I64:
        """Leaf of every row, given ``go_left[node, row]`` for every internal node.

        The one walk every prediction path shares when decisions come from several parties
        (the vertical guest fills the host-owned rows of ``go_left`` with their bits).
        """
        node = np.zeros(go_left.shape[1], dtype=np.int64)
        internal = self.internal
        for _ in range(self.depth):
            idx = np.flatnonzero(internal[node])
            if idx.size == 0:
                break
            nd = node[idx]
            node[idx] = np.where(go_left[nd, idx], self.left[nd], self.right[nd])
        return node

    def local_decisions_binned(self, codes: npt.NDArray[Any], missing_bin: int) -> B8:
        """``go_left[node, row]`` of the local splits on bin codes ``(features, rows)``
        (False elsewhere): what a party computes itself before adding others' decisions."""
        out = np.zeros((self.n_nodes, codes.shape[1]), dtype=np.bool_)
        for nd in np.flatnonzero(self.owner == LOCAL).tolist():
            b = codes[self.feature[nd]]
            out[nd] = (b <= self.threshold_bin[nd]) | ((b == missing_bin) & self.default_left[nd])
        return out

    def local_decisions_raw(self, X: F64) -> B8:
        """As :meth:`local_decisions_binned` on raw rows ``X`` (NaN = missing)."""
        out = np.zeros((self.n_nodes, X.shape[0]), dtype=np.bool_)
        for nd in np.flatnonzero(self.owner == LOCAL).tolist():
            x = X[:, self.feature[nd]]
            out[nd] = np.where(np.isnan(x), self.default_left[nd], x <= self.threshold[nd])
        return out

    def leaves_binned(self, data: BinnedData) -> I64:
        """Leaf index of every row of bin-coded ``data`` (a tree of local splits only)."""
        node = np.zeros(data.n_rows, dtype=np.int64)
        codes, missing = data.codes, data.missing_bin
        for _ in range(self.depth):
            idx = np.flatnonzero(self.feature[node] >= 0)
            if idx.size == 0:
                break
            nd = node[idx]
            b = codes[self.feature[nd], idx]
            go_left = np.where(b == missing, self.default_left[nd], b <= self.threshold_bin[nd])
            node[idx] = np.where(go_left, self.left[nd], self.right[nd])
        return node

    def leaves_raw(self, X: F64) -> I64:
        """Leaf index of every row of raw features ``X`` (NaN = missing; local splits only)."""
        node = np.zeros(X.shape[0], dtype=np.int64)
        for _ in range(self.depth):
            idx = np.flatnonzero(self.feature[node] >= 0)
            if idx.size == 0:
                break
            nd = node[idx]
            x = X[idx, self.feature[nd]]
            go_left = np.where(np.isnan(x), self.default_left[nd], x <= self.threshold[nd])
            node[idx] = np.where(go_left, self.left[nd], self.right[nd])
        return node

    def predict_binned(self, data: BinnedData) -> F64:
        """Leaf values ``(n, K)`` for bin-coded rows."""
        return np.asarray(self.value[self.leaves_binned(data)])

    def predict_raw(self, X: F64) -> F64:
        """Leaf values ``(n, K)`` for raw rows."""
        return np.asarray(self.value[self.leaves_raw(X)])

    # -- persistence -------------------------------------------------------------------------

    def to_dict(self, *, owners: bool | None = None) -> dict[str, Any]:
        """A JSON-ready dict; ``owners`` (default: only when a split is not local) adds the
        owner array (the vertical guest's files always carry it)."""
        out = {
            "feature": self.feature.tolist(),
            "threshold_bin": self.threshold_bin.tolist(),
            # JSON has no infinity: a threshold above every cut is written as null.
            "threshold": [None if not np.isfinite(t) else float(t) for t in self.threshold],
            "default_left": self.default_left.tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "value": self.value.tolist(),
            "gain": self.gain.tolist(),
            "cover": self.cover.tolist(),
            "depth": self.depth,
        }
        if owners or (owners is None and not self.is_local):
            out = {"owner": self.owner.tolist(), **out}
        return out

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], n_parties: int = 0, n_features: int | None = None
    ) -> Tree:
        """Parse :meth:`to_dict` output (untrusted: :class:`ModelError` for anything else).

        A missing threshold (``null``) is infinite for a local split or a leaf and NaN (not
        known here) for another party's split. ``n_parties`` and ``n_features`` are checked
        as by :meth:`check`.
        """
        try:
            raw_owner = d.get("owner")
            owner = np.asarray([] if raw_owner is None else raw_owner, dtype=np.int64)
            foreign = owner > LOCAL if owner.size else np.zeros(len(d["threshold"]), np.bool_)
            if foreign.shape != (len(d["threshold"]),):
                raise ValueError("owner and threshold lengths differ")
            thr = [
                (np.nan if f else np.inf) if t is None else float(t)
                for t, f in zip(d["threshold"], foreign.tolist(), strict=True)
            ]
            tree = cls(
                feature=np.asarray(d["feature"], dtype=np.int64),
                threshold_bin=np.asarray(d["threshold_bin"], dtype=np.int64),
                threshold=np.asarray(thr, dtype=np.float64),
                default_left=np.asarray(d["default_left"], dtype=np.bool_),
                left=np.asarray(d["left"], dtype=np.int64),
                right=np.asarray(d["right"], dtype=np.int64),
                value=np.asarray(d["value"], dtype=np.float64),
                gain=np.asarray(d["gain"], dtype=np.float64),
                cover=np.asarray(d["cover"], dtype=np.float64),
                depth=int(d["depth"]),
                owner=owner,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"invalid tree: {exc}") from None
        tree.check(n_parties, n_features)
        return tree

    def check(self, n_parties: int = 0, n_features: int | None = None) -> None:
        """Raise :class:`ModelError` unless the arrays form a valid tree.

        ``n_parties``: how many other parties may own splits (0: a local tree);
        ``n_features``: the number of local features, when known.
        """
        n = self.n_nodes
        arrays = (
            self.feature,
            self.threshold_bin,
            self.threshold,
            self.default_left,
            self.left,
            self.right,
            self.gain,
            self.cover,
            self.owner,
        )
        if n == 0 or any(a.shape != (n,) for a in arrays) or self.value.ndim != 2:
            raise ModelError("invalid tree: inconsistent array shapes")
        if self.value.shape[0] != n or not np.all(np.isfinite(self.value)):
            raise ModelError("invalid tree: bad leaf values")
        if np.any(self.owner < LEAF) or np.any(self.owner > n_parties):
            raise ModelError("invalid tree: unknown owner")
        local = self.owner == LOCAL
        if np.any(self.feature[local] < 0) or (
            n_features is not None and np.any(self.feature[local] >= n_features)
        ):
            raise ModelError("invalid tree: feature out of range")
        internal = self.internal
        kids = np.concatenate([self.left[internal], self.right[internal]])
        if np.any(kids <= 0) or np.any(kids >= n) or np.unique(kids).size != kids.size:
            raise ModelError("invalid tree: bad child links")
        if not 0 <= self.depth <= 64:
            raise ModelError("invalid tree: bad depth")


class TreeBuilder:
    """Grows a tree a layer at a time; :meth:`finish` freezes it into a :class:`Tree`.

    Arrays with doubling capacity, so adding a layer's nodes and splits is a few vectorised
    assignments rather than a Python loop per node.
    """

    def __init__(self, n_outputs: int, capacity: int = 64) -> None:
        self.n_outputs = n_outputs
        self.n_nodes = 0
        self.depth = 0
        self._feature = np.full(capacity, -1, dtype=np.int64)
        self._threshold_bin = np.full(capacity, -1, dtype=np.int64)
        self._threshold = np.full(capacity, np.inf)
        self._default_left = np.zeros(capacity, dtype=np.bool_)
        self._left = np.full(capacity, -1, dtype=np.int64)
        self._right = np.full(capacity, -1, dtype=np.int64)
        self._value = np.zeros((capacity, n_outputs))
        self._gain = np.zeros(capacity)
        self._cover = np.zeros(capacity)
        self._owner = np.full(capacity, LEAF, dtype=np.int64)

    def add_nodes(self, values: F64, cover: F64) -> I64:
        """Append leaves with ``values`` ``(m, K)`` and hessian sums ``cover``; return ids."""
        m = values.shape[0]
        start = self.n_nodes
        self._reserve(start + m)
        self._value[start : start + m] = np.asarray(values).reshape(m, self.n_outputs)
        self._cover[start : start + m] = cover
        self.n_nodes += m
        return np.arange(start, start + m, dtype=np.int64)

    def set_splits(
        self,
        nodes: I64,
        feature: I64,
        threshold_bin: I64,
        threshold: F64,
        default_left: B8,
        gain: F64,
        left: I64,
        right: I64,
        owner: I64 | None = None,
    ) -> None:
        """Turn leaves ``nodes`` into splits (all arguments are arrays aligned with ``nodes``;
        ``owner`` defaults to local splits)."""
        self._owner[nodes] = LOCAL if owner is None else owner
        self._feature[nodes] = feature
        self._threshold_bin[nodes] = threshold_bin
        self._threshold[nodes] = threshold
        self._default_left[nodes] = default_left
        self._gain[nodes] = gain
        self._left[nodes] = left
        self._right[nodes] = right

    def _reserve(self, size: int) -> None:
        capacity = self._feature.size
        if size <= capacity:
            return
        new = max(size, 2 * capacity)
        pad = new - capacity
        self._feature = np.concatenate([self._feature, np.full(pad, -1, dtype=np.int64)])
        self._threshold_bin = np.concatenate(
            [self._threshold_bin, np.full(pad, -1, dtype=np.int64)]
        )
        self._threshold = np.concatenate([self._threshold, np.full(pad, np.inf)])
        self._default_left = np.concatenate([self._default_left, np.zeros(pad, dtype=np.bool_)])
        self._left = np.concatenate([self._left, np.full(pad, -1, dtype=np.int64)])
        self._right = np.concatenate([self._right, np.full(pad, -1, dtype=np.int64)])
        self._value = np.concatenate([self._value, np.zeros((pad, self.n_outputs))])
        self._gain = np.concatenate([self._gain, np.zeros(pad)])
        self._cover = np.concatenate([self._cover, np.zeros(pad)])
        self._owner = np.concatenate([self._owner, np.full(pad, LEAF, dtype=np.int64)])

    def finish(self) -> Tree:
        n = self.n_nodes
        return Tree(
            feature=self._feature[:n].copy(),
            threshold_bin=self._threshold_bin[:n].copy(),
            threshold=self._threshold[:n].copy(),
            default_left=self._default_left[:n].copy(),
            left=self._left[:n].copy(),
            right=self._right[:n].copy(),
            value=self._value[:n].copy(),
            gain=self._gain[:n].copy(),
            cover=self._cover[:n].copy(),
            depth=self.depth,
            owner=self._owner[:n].copy(),
        )
