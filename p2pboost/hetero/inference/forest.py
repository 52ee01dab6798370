"""The arithmetic of one-round inference, pure and vectorised (no I/O).

A *host* turns a batch of its rows into one bit per (split it owns, row): ``x <= threshold``,
or the split's default direction for a missing value (:func:`host_bits`). The bits travel
packed, eight rows to a byte (:func:`pack_bits` / :func:`unpack_bits`).

The *guest* holds every tree's structure. :class:`FlatForest` lays all trees end to end in
flat arrays once, so that a batch costs a fixed number of numpy calls whatever its size:
the guest's own splits are evaluated together, each host's bits are dropped into place, and
all trees are walked at once, one level per step. Leaf values are then added tree by tree in
training order, so the margins are bit-for-bit those of :meth:`GuestModel.predict_margin`
(float addition is not associative; the order is part of the result).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.features import Features
from p2pboost.hetero.model import GUEST, GuestModel, HostModel

__all__ = ["FlatForest", "HostSplits", "host_bits", "pack_bits", "unpack_bits"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
U8 = npt.NDArray[np.uint8]
#: From this many rows on, the guest's decisions are computed feature by feature.
GROUPED_ROWS = 1024


@dataclass(frozen=True, slots=True, eq=False)
class HostSplits:
    """A host's splits as arrays, in (tree, node) order: the order of its bits on the wire."""

    tree: I64
    node: I64
    feature: I64
    threshold: F64
    default_left: B8

    @classmethod
    def of(cls, model: HostModel) -> HostSplits:
        splits = sorted(model.splits, key=lambda s: (s.tree, s.node))
        return cls(
            tree=np.array([s.tree for s in splits], dtype=np.int64),
            node=np.array([s.node for s in splits], dtype=np.int64),
            feature=np.array([s.feature for s in splits], dtype=np.int64),
            threshold=np.array([s.threshold for s in splits], dtype=np.float64),
            default_left=np.array([s.default_left for s in splits], dtype=np.bool_),
        )

    def first_trees(self, trees: int) -> HostSplits:
        """The splits of trees ``0 .. trees-1`` only."""
        keep = self.tree < trees
        return HostSplits(
            self.tree[keep],
            self.node[keep],
            self.feature[keep],
            self.threshold[keep],
            self.default_left[keep],
        )


def host_bits(splits: HostSplits, X: Features | F64) -> B8:
    """``go_left[split, row]`` for every split of the host and every row of ``X`` (checked
    features, dense or sparse, of which only the split features are read; or a feature
    store's rows)."""
    if isinstance(X, Features):
        values = X.columns(splits.feature)
    else:
        values = np.asarray(X[:, splits.feature].T, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        below = values <= splits.threshold[:, None]
    return np.where(np.isnan(values), splits.default_left[:, None], below)


def pack_bits(bits: B8) -> U8:
    """Rows of bits packed eight to a byte, flattened (``np.packbits`` per split)."""
    return np.packbits(bits, axis=1).reshape(-1)


def unpack_bits(packed: U8, n_splits: int, n_rows: int) -> B8:
    """Inverse of :func:`pack_bits`; padding bits must be zero (checked by the caller)."""
    width = (n_rows + 7) // 8
    matrix = np.unpackbits(packed.reshape(n_splits, width), axis=1)
    return matrix[:, :n_rows].astype(np.bool_)


def padding_is_clear(packed: U8, n_splits: int, n_rows: int) -> bool:
    """Whether the bits beyond ``n_rows`` in every packed split row are zero."""
    width = (n_rows + 7) // 8
    if n_splits == 0 or n_rows % 8 == 0:
        return True
    last = packed.reshape(n_splits, width)[:, -1]
    return not np.any(last & np.uint8((1 << (8 - n_rows % 8)) - 1))


class FlatForest:
    """Every tree the guest predicts with, in flat arrays (see the module docstring)."""

    def __init__(self, model: GuestModel, n_rounds: int | None = None) -> None:
        trees = model.trees[: model.used_trees(n_rounds)]
        sizes = np.array([t.n_nodes for t in trees], dtype=np.int64)
        offsets = np.cumsum(sizes) - sizes
        self.n_features = model.n_features
        self.n_outputs = int(model.base_margin.size)
        self.base_margin = model.base_margin
        self.roots = offsets
        self.max_depth = max((t.depth for t in trees), default=0)
        owner = _cat([t.owner for t in trees], np.int64)
        self.internal = owner >= 0
        self.left = _cat(
            [np.where(t.left >= 0, t.left + o, -1) for t, o in zip(trees, offsets, strict=True)],
            np.int64,
        )
        self.right = _cat(
            [np.where(t.right >= 0, t.right + o, -1) for t, o in zip(trees, offsets, strict=True)],
            np.int64,
        )
        self.guest_nodes = np.flatnonzero(owner == GUEST)
        self.guest_feature = _cat([t.feature for t in trees], np.int64)[self.guest_nodes]
        self.guest_threshold = _cat([t.threshold for t in trees], np.float64)[self.guest_nodes]
        self.guest_default_left = _cat([t.default_left for t in trees], np.bool_)[self.guest_nodes]
        self.values = [t.value for t in trees]
        self.tree_output = list(model.tree_output[: len(trees)])
        # Host k's splits of the used trees, in its wire order (tree, node), and where their
        # bits go in the flat forest.
        self.n_trees = len(trees)
        self.host_tree: list[I64] = []
        self.host_node: list[I64] = []
        self.host_nodes: list[I64] = []
        for k in range(1, len(model.hosts) + 1):
            tree_idx, node_idx = model.host_nodes(k)
            used = tree_idx < len(trees)
            self.host_tree.append(tree_idx[used])
            self.host_node.append(node_idx[used])
            self.host_nodes.append(offsets[tree_idx[used]] + node_idx[used])
        self.n_nodes = int(sizes.sum())
        # The walk's transition table: child[2 * node + go_left]; a leaf leads to itself, so
        # every (tree, row) takes the same number of steps without an "is internal" test.
        nodes = np.arange(self.n_nodes)
        self._child = np.stack(
            [np.where(self.internal, self.right, nodes), np.where(self.internal, self.left, nodes)],
            axis=1,
        ).reshape(-1)
        # The guest's splits by feature, thresholds as ranks among that feature's thresholds:
        # x <= t_k  <=>  (number of the feature's thresholds below x) <= k.
        self._guest_groups: list[tuple[int, I64, F64, I64, B8]] = []
        for feature in np.unique(self.guest_feature).tolist():
            sel = np.flatnonzero(self.guest_feature == feature)
            thresholds = np.unique(self.guest_threshold[sel])
            rank = np.searchsorted(thresholds, self.guest_threshold[sel])
            self._guest_groups.append(
                (
                    feature,
                    self.guest_nodes[sel],
                    thresholds,
                    rank[:, None],
                    self.guest_default_left[sel],
                )
            )

    def margin(self, X: F64, host_bits: Sequence[B8]) -> F64:
        """Raw scores ``(n, K)`` from the guest's rows and each host's ``go_left`` bits."""
        n = X.shape[0]
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise InputError(f"expected {self.n_features} guest features, got shape {X.shape}")
        if len(host_bits) != len(self.host_nodes):
            raise InputError(f"need bits from {len(self.host_nodes)} hosts, got {len(host_bits)}")
        go_left = np.zeros((self.n_nodes, n), dtype=np.bool_)
        if n >= GROUPED_ROWS:
            self._guest_bits_by_feature(X, go_left)
        else:
            values = X[:, self.guest_feature].T
            with np.errstate(invalid="ignore"):
                below = values <= self.guest_threshold[:, None]
            go_left[self.guest_nodes] = np.where(
                np.isnan(values), self.guest_default_left[:, None], below
            )
        for nodes, bits in zip(self.host_nodes, host_bits, strict=True):
            if bits.shape != (nodes.size, n):
                raise InputError(f"host bits of shape {bits.shape}, expected {(nodes.size, n)}")
            go_left[nodes] = bits
        flat = go_left.reshape(-1)  # go_left[node, row] == flat[node * n + row]
        node = np.repeat(self.roots[:, None], n, axis=1)  # (trees, rows)
        cols = np.arange(n)[None, :]
        for _ in range(self.max_depth):
            node = self._child[2 * node + flat[node * n + cols]]
        margin = np.tile(self.base_margin, (n, 1))
        for t, (values_t, out) in enumerate(zip(self.values, self.tree_output, strict=True)):
            leaf = node[t] - self.roots[t]
            if out < 0:
                margin += values_t[leaf]
            else:
                margin[:, out] += values_t[leaf, 0]
        return margin

    def _guest_bits_by_feature(self, X: F64, go_left: B8) -> None:
        """The guest's decisions, one ``searchsorted`` per feature instead of a
        (splits x rows) float copy; missing values take each split's default."""
        columns = np.ascontiguousarray(X.T)
        for feature, nodes, thresholds, rank, default_left in self._guest_groups:
            x = columns[feature]
            bits = np.searchsorted(thresholds, x, side="left")[None, :] <= rank
            missing = np.isnan(x)
            if missing.any():
                bits[:, missing] = default_left[:, None]
            go_left[nodes] = bits


def _cat(parts: list[npt.NDArray[np.generic]], dtype: type[np.generic]) -> npt.NDArray[Any]:
    """Concatenate per-tree arrays (none: an empty array of ``dtype``)."""
    return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype=dtype)
