"""Encrypted gradient histograms: per feature, per bin, the Paillier sum of a node's rows.

Adding plaintexts under Paillier is multiplying ciphertexts modulo ``n**2``, so a histogram cell
is the product of the ciphertexts of the rows that fall into it. The work is one modular
multiplication per row and feature: rows are grouped by (feature, bin) with numpy (a stable
``argsort`` of each bin column, ``bincount`` for the group sizes), and the products of every
cell of a plane are one kernel call (:func:`~p2pboost.crypto.kernels.segment_products`: C
over GMP with the native kernel, a gmpy2 loop otherwise). We measured lazy reduction
(multiplying two or four ciphertexts before one ``% n2``): it is slower with GMP, whose
division cost grows with the dividend, so every product is reduced at once.

What the protocols need besides the plain build:

* **chunks**: histograms of disjoint row sets merge by multiplying cells
  (:meth:`EncryptedHistogram.merge`), so a host accumulates the root histogram while chunks of
  ciphertexts are still arriving;
* **sibling by subtraction**: ``parent * child**-1`` per cell
  (:meth:`~EncryptedHistogram.subtract`);
  the inverses are computed with Montgomery's batch-inversion trick, one ``invert`` per
  histogram instead of one per cell;
* **sparse features**: the cell of a feature's most common bin (zero, for sparse data) is not
  summed row by row but derived from the node total: ``total * (product of the other cells)**-1``
  (the divisions of every feature of a build share one batch inversion);
* **cumulative sums** over bins (:meth:`~EncryptedHistogram.cumulative`): the left sums of every
  split candidate.

A histogram holds one :class:`~p2pboost.crypto.residues.Residues` of cells per *plane*: rows
whose packed g/h need several plaintexts (many outputs) have one ciphertext per plane.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from gmpy2 import mpz  # type: ignore[import-untyped]

from p2pboost.crypto import _kernel_gmpy2 as _py
from p2pboost.crypto import kernels
from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.crypto.residues import Residues
from p2pboost.exceptions import InputError

__all__ = ["EncryptedHistogram", "batch_invert", "build_histogram", "product", "products_made"]

_ONE = mpz(1)


def product(values: Sequence[Any], n2: Any) -> Any:
    """``prod(values) mod n2`` (the encryption of the sum; ``1`` for no values)."""
    it = iter(values)
    acc = next(it, _ONE)
    for c in it:
        acc = acc * c % n2
    return acc


def batch_invert(values: Sequence[Any], modulus: Any) -> list[Any]:
    """Inverses of all ``values`` modulo ``modulus`` with one ``invert`` (Montgomery's trick).

    Three multiplications per value instead of one ``invert`` each (about ten times dearer);
    the gmpy2 kernel's :func:`~p2pboost.crypto._kernel_gmpy2.divide` of ones.
    """
    return _py.divide(modulus, [_ONE] * len(values), values)


@dataclass(frozen=True, eq=False)
class EncryptedHistogram:
    """Ciphertext sums and row counts per (feature, bin) of one node (or of one chunk).

    ``planes[p]`` holds plane ``p``'s cells, cell ``f * n_bins + b`` being the ciphertext summed
    over the rows with bin ``b`` of feature ``f``, as :class:`~p2pboost.crypto.residues.
    Residues` (bytes for the native kernel, integers for the gmpy2 one); ``counts[f, b]`` is
    how many rows that is. An empty cell holds ``1``.
    """

    public_key: AnyPublicKey
    n_bins: int
    counts: npt.NDArray[np.int64]
    planes: tuple[Residues, ...]

    @property
    def n_features(self) -> int:
        return int(self.counts.shape[0])

    def cell(self, feature: int, bin_: int) -> list[Any]:
        """The ciphertexts (one per plane) of one cell, as integers."""
        i = feature * self.n_bins + bin_
        return [plane.take([i]).values[0] for plane in self.planes]

    def _check_compatible(self, other: EncryptedHistogram) -> None:
        if (
            other.public_key != self.public_key
            or other.counts.shape != self.counts.shape
            or len(other.planes) != len(self.planes)
        ):
            raise InputError("histograms differ in key, shape or number of planes")

    def merge(self, other: EncryptedHistogram) -> EncryptedHistogram:
        """Histogram of the union of two disjoint row sets (chunked accumulation)."""
        self._check_compatible(other)
        n2 = self.public_key.modulus
        planes = tuple(
            kernels.multiply(n2, pa, pb) for pa, pb in zip(self.planes, other.planes, strict=True)
        )
        return EncryptedHistogram(self.public_key, self.n_bins, self.counts + other.counts, planes)

    def subtract(self, child: EncryptedHistogram) -> EncryptedHistogram:
        """The sibling's histogram: this (parent) minus ``child``, cell by cell."""
        self._check_compatible(child)
        counts = self.counts - child.counts
        if counts.size and counts.min() < 0:
            raise InputError("child has more rows in a cell than its parent")
        n2 = self.public_key.modulus
        # Only the child's non-empty cells cost anything: an empty cell is E(0) = 1, whose
        # inverse is 1, so the parent's cell is the sibling's as it is (sparse data, and the
        # features a tree does not sample, leave most cells empty). One batched division per
        # plane: a single modular inversion for all its cells (Montgomery's trick).
        planes = []
        for pa, pc in zip(self.planes, child.planes, strict=True):
            filled = np.flatnonzero(~pc.ones())
            quotients = kernels.divide(n2, pa.take(filled), pc.take(filled))
            planes.append(pa.replace(filled, quotients))
        return EncryptedHistogram(self.public_key, self.n_bins, counts, tuple(planes))

    def cumulative(self) -> EncryptedHistogram:
        """Prefix sums over bins: cell ``(f, b)`` becomes the sum of bins ``0..b`` of ``f``."""
        n2 = self.public_key.modulus
        planes = tuple(kernels.prefix_products(n2, plane, self.n_bins) for plane in self.planes)
        counts = np.cumsum(self.counts, axis=1, dtype=np.int64)
        return EncryptedHistogram(self.public_key, self.n_bins, counts, planes)

    def nbytes(self) -> int:
        """Memory its ciphertexts take (the cells of every plane, in their current forms)."""
        return sum(plane.nbytes() for plane in self.planes)


class _Made(threading.local):
    """Ciphertext products made by :func:`build_histogram` in this thread (read the
    difference around a call with :func:`products_made` to count a host's additions; per
    thread, so that pool threads running other shards' builds do not count in)."""

    products = 0


_MADE = _Made()


def products_made() -> int:
    """Ciphertext products :func:`build_histogram` has made in this thread so far."""
    return _MADE.products


def _feature_list(features: npt.NDArray[np.integer[Any]], n_features: int) -> list[int]:
    out = [int(f) for f in np.asarray(features).reshape(-1)]
    if any(not 0 <= f < n_features for f in out) or len(set(out)) != len(out):
        raise InputError("features must be distinct column indices of bins")
    return out


def build_histogram(
    public_key: AnyPublicKey,
    bins: npt.NDArray[np.integer[Any]],
    n_bins: int,
    ciphertexts: Sequence[Residues | Sequence[Any]],
    rows: npt.NDArray[np.integer[Any]] | None = None,
    *,
    zero_bins: npt.NDArray[np.integer[Any]] | None = None,
    features: npt.NDArray[np.integer[Any]] | None = None,
) -> EncryptedHistogram:
    """Histogram of the ``rows`` of ``bins`` (all rows when None).

    ``features`` (default: all) are the columns accumulated; the others keep empty cells
    (the encryption of 0 and zero counts) and cost nothing: column sampling saves a host the
    additions of every feature a tree does not use.

    ``bins`` is the ``(n_rows, n_features)`` uint8/uint16 bin matrix; ``ciphertexts[p]`` holds
    plane ``p`` of every row (:class:`~p2pboost.crypto.residues.Residues`, or a list of
    integers), indexed like ``bins``: for a chunk, pass the chunk's bins and ciphertexts.
    ``zero_bins[f]``, when given and ``>= 0``, names the bin of feature ``f`` that is derived
    from the node total instead of summed (its rows are skipped: sparse data).

    The products of every cell of a plane are one kernel call
    (:func:`~p2pboost.crypto.kernels.segment_products`): the rows sorted by (feature, bin)
    with numpy, the cells as segments of that order.
    """
    if bins.ndim != 2 or bins.dtype.kind != "u":
        raise InputError("bins must be a 2-d unsigned integer matrix (rows x features)")
    n_rows, n_features = bins.shape
    if not 1 <= n_bins <= 1 << 16:
        raise InputError("n_bins must be in [1, 65536]")
    mod = public_key.modulus
    width = public_key.ciphertext_bytes
    planes_in = [kernels.values_of(plane, width) for plane in ciphertexts]
    if not planes_in or any(len(plane) != n_rows for plane in planes_in):
        raise InputError("need one ciphertext per row of bins in every plane")
    idx = (
        np.arange(n_rows, dtype=np.int64)
        if rows is None
        else np.asarray(rows, dtype=np.int64).reshape(-1)
    )
    if idx.size and (idx.min() < 0 or idx.max() >= n_rows):
        raise InputError("row index out of range")
    sub = bins[idx]
    if sub.size and int(sub.max()) >= n_bins:
        raise InputError("a bin index is >= n_bins")
    zb = (
        np.full(n_features, -1, dtype=np.int64)
        if zero_bins is None
        else np.asarray(zero_bins, dtype=np.int64).reshape(-1)
    )
    if zb.shape != (n_features,) or np.any(zb >= n_bins):
        raise InputError("zero_bins needs one bin (or -1) per feature")

    counts = np.zeros((n_features, n_bins), dtype=np.int64)
    used = range(n_features) if features is None else sorted(_feature_list(features, n_features))
    # Rows in (feature, bin) order: one segment per cell, cells in plane order.
    orders: list[npt.NDArray[np.int64]] = []
    sizes = np.zeros(n_features * n_bins, dtype=np.int64)
    derived_features: list[int] = []
    for f in used:
        col = sub[:, f].astype(np.int64)
        ids = idx
        if zb[f] >= 0:
            keep = col != zb[f]
            col, ids = col[keep], idx[keep]
            derived_features.append(f)
        orders.append(ids[np.argsort(col, kind="stable")])
        cnt = np.bincount(col, minlength=n_bins)
        counts[f] = cnt
        sizes[f * n_bins : (f + 1) * n_bins] = cnt
        if zb[f] >= 0:
            counts[f, int(zb[f])] = idx.size - int(cnt.sum())
    order = np.concatenate(orders) if orders else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    planes = [kernels.segment_products(mod, plane, order, offsets) for plane in planes_in]
    n_planes = len(planes)
    made = n_planes * (int(order.size) - int(np.count_nonzero(sizes)))

    if derived_features:  # the node total over the product of the other cells, batched
        made += n_planes * max(0, int(idx.size) - 1)
        cells = np.array([f * n_bins + int(zb[f]) for f in derived_features], dtype=np.int64)
        feature_cells = np.concatenate(
            [np.arange(f * n_bins, (f + 1) * n_bins, dtype=np.int64) for f in derived_features]
        )
        per_feature = np.arange(0, feature_cells.size + 1, n_bins, dtype=np.int64)
        occupied = int(np.count_nonzero(sizes.reshape(n_features, n_bins)[derived_features]))
        made += n_planes * occupied
        for p, plane in enumerate(planes):
            total = kernels.segment_products(
                mod, planes_in[p], idx, np.array([0, idx.size], dtype=np.int64)
            )
            totals = total.take(np.zeros(len(derived_features), dtype=np.int64))
            others = kernels.segment_products(mod, plane, feature_cells, per_feature)
            planes[p] = plane.replace(cells, kernels.divide(mod, totals, others))
    _MADE.products += made
    return EncryptedHistogram(public_key, n_bins, counts, tuple(planes))
