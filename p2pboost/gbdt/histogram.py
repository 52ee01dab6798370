"""Gradient histograms: per node, per feature, per bin sums of g and h (and row counts).

A layer's histograms are built with one ``np.bincount`` per feature and channel over the keys
``node_slot * B + bin`` (``B`` = bins per feature, missing included), so the cost is a few
vectorised passes over ``rows x features`` whatever the number of nodes in the layer.

Gradients are expected on a :mod:`~p2pboost.gbdt.fixedpoint` grid: every sum is then exact in
float64 regardless of order, so

* ``subtract(parent, child)`` equals the directly built sibling *exactly*, and
* the sparse-aware builder (which never touches each feature's most frequent bin and derives
  it from the node totals) equals the dense builder *exactly*.

That exactness is what lets the federated protocol (integer sums under Paillier) reproduce the
plaintext trees bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from p2pboost.gbdt.binning import BinnedData

__all__ = [
    "SPARSE_DENSITY",
    "DenseHistogramBuilder",
    "Histogram",
    "HistogramBuilder",
    "SparseHistogramBuilder",
    "default_bin_density",
    "make_builder",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
#: ``make_builder(..., sparse="auto")`` goes sparse at or below this density.
SPARSE_DENSITY = 0.25
#: Layers with at most this many (row, feature) entries use one bincount for all features.
_SMALL_ENTRIES = 32768
#: Interleaved histogram copies per feature (see DenseHistogramBuilder).
_LANES = 4
#: Pre-widen the bin codes (for root histograms) if there are at most this many.
_WIDE_CODES_LIMIT = 4_000_000
IntArray = npt.NDArray[np.integer[Any]]


@dataclass(frozen=True, slots=True, eq=False)
class Histogram:
    """Histograms of ``k`` nodes: ``grad``/``hess`` ``(k, F, B, K)``, ``count`` ``(k, F, B)``.

    ``K`` is the number of outputs (1 for scalar trees). ``count`` is ``None`` when row counts
    were not requested (they are only needed for ``min_samples_leaf > 1``).
    """

    grad: F64
    hess: F64
    count: I64 | None

    @property
    def n_nodes(self) -> int:
        return int(self.grad.shape[0])

    def take(self, index: IntArray) -> Histogram:
        """The histograms of the nodes at positions ``index``."""
        cnt = None if self.count is None else self.count[index]
        return Histogram(self.grad[index], self.hess[index], cnt)

    def __sub__(self, other: Histogram) -> Histogram:
        """Sibling histograms: ``parent - child`` (exact for on-grid gradients)."""
        if self.count is None or other.count is None:
            cnt = None
        else:
            cnt = self.count - other.count
        return Histogram(self.grad - other.grad, self.hess - other.hess, cnt)

    @staticmethod
    def concat_features(parts: list[Histogram]) -> Histogram:
        """Join histograms of the same nodes over different features, in the given order.

        The federated guest joins its own features' histograms and each host's (decrypted)
        ones in the global feature order before calling the split finder.
        """
        counts = [p.count for p in parts if p.count is not None]
        cnt = np.concatenate(counts, axis=1) if len(counts) == len(parts) else None
        return Histogram(
            np.concatenate([p.grad for p in parts], axis=1),
            np.concatenate([p.hess for p in parts], axis=1),
            cnt,
        )


class HistogramBuilder(Protocol):
    """Anything that builds layer histograms; the grower only needs this method.

    A federated protocol supplies its own (plaintext guest features plus decrypted host
    features, joined with :meth:`Histogram.concat_features`).
    """

    def build(
        self,
        rows: IntArray | None,
        slots: IntArray | None,
        n_nodes: int,
        grad: F64,
        hess: F64,
    ) -> Histogram:
        """Histograms of ``n_nodes`` nodes; row ``rows[i]`` is in node ``slots[i]``."""
        ...


class DenseHistogramBuilder:
    """Histograms by ``np.bincount`` over the chosen rows, feature by feature.

    Measured choices (20,000 rows x 23 features, one core):

    * one bincount per feature and channel beats one bincount over all ``rows x features``
      keys by 2-4x: the arrays stay cache-sized and no large temporaries are allocated;
    * rows are spread over ``_LANES`` interleaved copies of each histogram, summed at the end.
      With few bins, consecutive rows often hit the same bin and each addition waits for the
      previous one; separate copies break that chain (about 1.5x faster). On the fixed-point
      grid the lane sums are exact, so the result is bit-identical;
    * small layers (few entries) go through one bincount for all features, where per-call
      overhead would dominate.

    Not thread-safe: a builder reuses one key buffer.
    """

    def __init__(self, data: BinnedData, with_counts: bool = False) -> None:
        self.n_features = data.n_features
        self.n_slots = data.n_slots
        self.n_rows = data.n_rows
        self.with_counts = with_counts
        self._codes = data.codes
        self._lane = (np.arange(data.n_rows, dtype=np.intp) % _LANES) * data.n_slots
        # Root keys (lane offset + bin) read every code: precompute them if memory allows.
        self._root_keys: npt.NDArray[np.intp] | None = None
        if data.codes.size <= _WIDE_CODES_LIMIT:
            self._root_keys = data.codes.astype(np.intp) + self._lane[None, :]
        self._key_buffer = np.empty(data.n_rows, dtype=np.intp)

    def build(
        self,
        rows: IntArray | None,
        slots: IntArray | None,
        n_nodes: int,
        grad: F64,
        hess: F64,
    ) -> Histogram:
        """Histograms of ``n_nodes`` nodes; row ``rows[i]`` belongs to node ``slots[i]``.

        ``rows=None`` means every row, all in node 0 (the root). ``grad``/``hess`` are
        ``(n_rows, K)`` for the whole data set.
        """
        if rows is None:
            n_nodes = 1
            codes: npt.NDArray[Any] = self._codes
            g_rows, h_rows, slot_arr = grad, hess, None
        else:
            codes = self._codes[:, rows]
            g_rows, h_rows = grad[rows], hess[rows]
            slot_arr = None if slots is None or n_nodes == 1 else np.asarray(slots)
        m = g_rows.shape[0]
        hist = _empty(n_nodes, self.n_features, self.n_slots, g_rows.shape[1], self.with_counts)
        g_cols = [np.ascontiguousarray(g_rows[:, c]) for c in range(g_rows.shape[1])]
        h_cols = [np.ascontiguousarray(h_rows[:, c]) for c in range(h_rows.shape[1])]
        if m * self.n_features <= _SMALL_ENTRIES:
            _add_all_features(hist, codes, slot_arr, g_cols, h_cols)
            return hist
        root_keys = self._root_keys if rows is None else None
        # Keys: (lane * n_nodes + slot) * B + bin, lanes interleaved over the rows.
        base = self._lane[:m] * n_nodes
        if slot_arr is not None:
            base += slot_arr.astype(np.intp) * self.n_slots
        keys = self._key_buffer[:m]

        def keys_of(f: int) -> IntArray:
            if root_keys is not None:
                return np.asarray(root_keys[f])
            np.add(base, codes[f], out=keys)
            return keys

        _add_by_feature(hist, keys_of, g_cols, h_cols)
        return hist


class SparseHistogramBuilder:
    """Histograms that skip each feature's most frequent bin (fixed on the training data).

    Only the (row, feature) entries outside that *default* bin are stored, as one flat list
    ordered by feature then row, and a layer is one bincount per channel over the keys
    ``(slot * F + feature) * B + bin`` of the entries whose rows are in the layer. The default
    bin's sums are the node totals minus the feature's other bins. On data with many zeros (or
    any dominant value) this touches a fraction of the entries, and the result equals
    :class:`DenseHistogramBuilder`'s exactly for on-grid gradients.
    """

    def __init__(self, data: BinnedData, with_counts: bool = False) -> None:
        self.n_features = data.n_features
        self.n_slots = data.n_slots
        self.n_rows = data.n_rows
        self.with_counts = with_counts
        self.default_bin = np.array(
            [int(np.argmax(np.bincount(col, minlength=data.n_slots))) for col in data.codes],
            dtype=np.int64,
        )
        feat, row = np.nonzero(data.codes != self.default_bin[:, None].astype(data.codes.dtype))
        self._rows = row.astype(np.intp)
        self._keys = feat.astype(np.intp) * data.n_slots + data.codes[feat, row].astype(np.intp)

    @property
    def density(self) -> float:
        """Share of (row, feature) entries outside the default bins."""
        return self._rows.size / max(1, self.n_rows * self.n_features)

    def build(
        self,
        rows: IntArray | None,
        slots: IntArray | None,
        n_nodes: int,
        grad: F64,
        hess: F64,
    ) -> Histogram:
        """Same contract as :meth:`DenseHistogramBuilder.build`."""
        fb = self.n_features * self.n_slots
        if rows is None:
            n_nodes = 1
            keys = self._keys
            entry_rows = self._rows
            node_of_row: IntArray = np.zeros(self.n_rows, dtype=np.intp)
            g_rows, h_rows = grad, hess
        else:
            slot_arr = np.zeros(len(rows), dtype=np.intp) if slots is None else np.asarray(slots)
            slot_of_row = np.full(self.n_rows, -1, dtype=np.intp)
            slot_of_row[rows] = slot_arr
            entry_slot = slot_of_row[self._rows]
            chosen = np.flatnonzero(entry_slot >= 0)
            keys = self._keys[chosen] + entry_slot[chosen] * fb
            entry_rows = self._rows[chosen]
            node_of_row = slot_arr
            g_rows, h_rows = grad[rows], hess[rows]
        k_out = grad.shape[1]
        hist = _empty(n_nodes, self.n_features, self.n_slots, k_out, self.with_counts)
        shape = (n_nodes, self.n_features, self.n_slots)
        size = n_nodes * fb
        feats = np.arange(self.n_features)
        for c in range(k_out):
            for arr, src, src_rows in ((hist.grad, grad, g_rows), (hist.hess, hess, h_rows)):
                w = src[entry_rows, c]
                arr[..., c] = np.bincount(keys, weights=w, minlength=size).reshape(shape)
                # Default bins: node totals minus the feature's other bins (exact on the grid).
                total = np.bincount(node_of_row, weights=src_rows[:, c], minlength=n_nodes)
                arr[:, feats, self.default_bin, c] = total[:, None] - arr[..., c].sum(axis=2)
        if hist.count is not None:
            hist.count[...] = np.bincount(keys, minlength=size).reshape(shape)
            n_total = np.bincount(node_of_row, minlength=n_nodes)
            hist.count[:, feats, self.default_bin] = n_total[:, None] - hist.count.sum(axis=2)
        return hist


def default_bin_density(data: BinnedData) -> float:
    """Share of (row, feature) entries outside each feature's most frequent bin."""
    most = sum(int(np.bincount(col, minlength=data.n_slots).max()) for col in data.codes)
    return 1.0 - most / max(1, data.n_rows * data.n_features)


def make_builder(
    data: BinnedData, sparse: bool | str, with_counts: bool
) -> DenseHistogramBuilder | SparseHistogramBuilder:
    """The histogram builder for ``data``: sparse-aware, dense, or ``"auto"``.

    ``"auto"`` picks the sparse-aware builder when at most ``SPARSE_DENSITY`` of the entries
    lie outside their feature's most frequent bin (the measured break-even is about 0.3).
    Both give identical histograms, so the choice only affects speed.
    """
    if sparse == "auto":
        sparse = default_bin_density(data) <= SPARSE_DENSITY
    if sparse:
        return SparseHistogramBuilder(data, with_counts)
    return DenseHistogramBuilder(data, with_counts)


def _empty(n_nodes: int, n_features: int, n_slots: int, k_out: int, counts: bool) -> Histogram:
    shape = (n_nodes, n_features, n_slots)
    return Histogram(
        np.empty((*shape, k_out)),
        np.empty((*shape, k_out)),
        np.empty(shape, dtype=np.int64) if counts else None,
    )


def _add_by_feature(
    hist: Histogram,
    keys_of: Callable[[int], IntArray],
    g_cols: list[F64],
    h_cols: list[F64],
) -> None:
    """Fill ``hist`` feature by feature from keys ``(lane * n_nodes + slot) * B + bin``.

    Each bincount lands contiguously in a per-channel buffer ``(F, lanes, nodes, B)``; the
    lanes are summed once at the end (exact on the grid, so the order does not matter).
    """
    n_nodes, n_features, n_slots = hist.grad.shape[:3]
    size = _LANES * n_nodes * n_slots
    raws = [np.empty((n_features, size)) for _ in range(2 * len(g_cols))]
    raw_count = np.empty((n_features, size), dtype=np.int64) if hist.count is not None else None
    for f in range(n_features):
        keys = keys_of(f)
        for c, (g, h) in enumerate(zip(g_cols, h_cols, strict=True)):
            raws[2 * c][f] = np.bincount(keys, weights=g, minlength=size)
            raws[2 * c + 1][f] = np.bincount(keys, weights=h, minlength=size)
        if raw_count is not None:
            raw_count[f] = np.bincount(keys, minlength=size)
    shape = (n_features, _LANES, n_nodes, n_slots)
    for c in range(len(g_cols)):
        hist.grad[..., c] = raws[2 * c].reshape(shape).sum(axis=1).transpose(1, 0, 2)
        hist.hess[..., c] = raws[2 * c + 1].reshape(shape).sum(axis=1).transpose(1, 0, 2)
    if hist.count is not None and raw_count is not None:
        hist.count[...] = raw_count.reshape(shape).sum(axis=1).transpose(1, 0, 2)


def _add_all_features(
    hist: Histogram,
    codes: npt.NDArray[np.integer[Any]],
    slots: IntArray | None,
    g_cols: list[F64],
    h_cols: list[F64],
) -> None:
    """Fill every feature of every node at once; ``codes`` ``(F, m)``, ``slots`` ``(m,)``.

    One bincount per channel over keys ``(slot * F + feature) * B + bin``, weights tiled once
    per feature: for small layers, where per-call overhead would dominate.
    """
    n_nodes, n_features, n_slots = hist.grad.shape[:3]
    size = n_nodes * n_features * n_slots
    k2 = codes.astype(np.intp)
    k2 += (np.arange(n_features, dtype=np.intp) * n_slots)[:, None]
    if slots is not None:
        k2 += (slots.astype(np.intp) * (n_features * n_slots))[None, :]
    keys = k2.reshape(-1)
    shape = (n_nodes, n_features, n_slots)
    for c, (g, h) in enumerate(zip(g_cols, h_cols, strict=True)):
        gw, hw = np.tile(g, n_features), np.tile(h, n_features)
        hist.grad[..., c] = np.bincount(keys, weights=gw, minlength=size).reshape(shape)
        hist.hess[..., c] = np.bincount(keys, weights=hw, minlength=size).reshape(shape)
    if hist.count is not None:
        hist.count[...] = np.bincount(keys, minlength=size).reshape(shape)
