"""A regression tree stored as flat arrays, with prediction on bin codes or raw values.

Node ``i`` is a leaf when ``feature[i] == -1``; otherwise rows with ``bin <= threshold_bin[i]``
(raw: ``x <= threshold[i]``) go to ``left[i]``, missing values go left iff ``default_left[i]``,
and the rest go to ``right[i]``. ``value[i]`` is the leaf's output vector (length ``K``; one
for scalar trees), already multiplied by the learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import ModelError
from p2pboost.gbdt.binning import BinnedData

__all__ = ["Tree", "TreeBuilder"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]


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

    @property
    def n_nodes(self) -> int:
        return int(self.feature.size)

    @property
    def n_outputs(self) -> int:
        return int(self.value.shape[1])

    @property
    def is_leaf(self) -> B8:
        return np.asarray(self.feature < 0)

    def leaves_binned(self, data: BinnedData) -> I64:
        """Leaf index of every row of bin-coded ``data``."""
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
        """Leaf index of every row of raw features ``X`` (NaN = missing)."""
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

    def to_dict(self) -> dict[str, Any]:
        return {
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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tree:
        try:
            thr = [np.inf if t is None else float(t) for t in d["threshold"]]
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
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"invalid tree: {exc}") from None
        tree.check()
        return tree

    def check(self) -> None:
        """Raise :class:`ModelError` unless the arrays form a valid tree."""
        n = self.n_nodes
        arrays = (self.threshold_bin, self.threshold, self.default_left, self.left, self.right)
        if n == 0 or any(a.shape != (n,) for a in arrays) or self.value.ndim != 2:
            raise ModelError("invalid tree: inconsistent array shapes")
        if self.value.shape[0] != n or not np.all(np.isfinite(self.value)):
            raise ModelError("invalid tree: bad leaf values")
        internal = self.feature >= 0
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
    ) -> None:
        """Turn leaves ``nodes`` into splits (all arguments are arrays aligned with ``nodes``)."""
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
        )
