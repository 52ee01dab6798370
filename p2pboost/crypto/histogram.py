"""Encrypted gradient histograms: per feature, per bin, the Paillier sum of a node's rows.

Adding plaintexts under Paillier is multiplying ciphertexts modulo ``n**2``, so a histogram cell
is the product of the ciphertexts of the rows that fall into it. The work is one modular
multiplication per row and feature, and the loop that does it is the only per-element Python
here: rows are grouped by bin with numpy (a stable ``argsort`` of the bin column, ``bincount``
for the group sizes), then each group is reduced by ``acc = acc * c % n2``. We measured lazy
reduction (multiplying two or four ciphertexts before one ``% n2``): it is slower with GMP, whose
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

A histogram holds one list of cells per *plane*: rows whose packed g/h need several plaintexts
(many outputs) have one ciphertext per plane.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import gmpy2  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
from gmpy2 import mpz

from p2pboost.crypto.keys import AnyPublicKey
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

    Three multiplications per value instead of one ``invert`` each (about ten times dearer).
    """
    if not values:
        return []
    prefix = [values[0]]
    for v in values[1:]:
        prefix.append(prefix[-1] * v % modulus)
    inv = gmpy2.invert(prefix[-1], modulus)
    out = [_ONE] * len(values)
    for i in range(len(values) - 1, 0, -1):
        out[i] = inv * prefix[i - 1] % modulus
        inv = inv * values[i] % modulus
    out[0] = inv
    return out


@dataclass(frozen=True, eq=False)
class EncryptedHistogram:
    """Ciphertext sums and row counts per (feature, bin) of one node (or of one chunk).

    ``planes[p][f * n_bins + b]`` is the ciphertext of plane ``p`` summed over the rows with bin
    ``b`` of feature ``f``; ``counts[f, b]`` is how many rows that is. An empty cell holds ``1``.
    """

    public_key: AnyPublicKey
    n_bins: int
    counts: npt.NDArray[np.int64]
    planes: tuple[list[Any], ...]

    @property
    def n_features(self) -> int:
        return int(self.counts.shape[0])

    def cell(self, feature: int, bin_: int) -> list[Any]:
        """The ciphertexts (one per plane) of one cell."""
        i = feature * self.n_bins + bin_
        return [plane[i] for plane in self.planes]

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
            [a * b % n2 for a, b in zip(pa, pb, strict=True)]
            for pa, pb in zip(self.planes, other.planes, strict=True)
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
        # features a tree does not sample, leave most cells empty).
        planes = tuple(list(pa) for pa in self.planes)
        for out, pc in zip(planes, child.planes, strict=True):
            filled = [i for i, c in enumerate(pc) if c != _ONE]
            inverses = batch_invert([pc[i] for i in filled], n2)
            for i, inv in zip(filled, inverses, strict=True):
                out[i] = out[i] * inv % n2
        return EncryptedHistogram(self.public_key, self.n_bins, counts, planes)

    def cumulative(self) -> EncryptedHistogram:
        """Prefix sums over bins: cell ``(f, b)`` becomes the sum of bins ``0..b`` of ``f``."""
        n2 = self.public_key.modulus
        B = self.n_bins
        planes = []
        for plane in self.planes:
            out = list(plane)
            for start in range(0, len(out), B):
                acc = out[start]
                for i in range(start + 1, start + B):
                    c = out[i]
                    acc = out[i] = acc if c == _ONE else acc * c % n2  # empty bin: no product
            planes.append(out)
        counts = np.cumsum(self.counts, axis=1, dtype=np.int64)
        return EncryptedHistogram(self.public_key, self.n_bins, counts, tuple(planes))


#: Ciphertext products made by :func:`build_histogram` in this process (read the difference
#: around a call with :func:`products_made` to count a host's additions).
_PRODUCTS = [0]


def products_made() -> int:
    """Ciphertext products :func:`build_histogram` has made in this process so far."""
    return _PRODUCTS[0]


def _feature_list(features: npt.NDArray[np.integer[Any]], n_features: int) -> list[int]:
    out = [int(f) for f in np.asarray(features).reshape(-1)]
    if any(not 0 <= f < n_features for f in out) or len(set(out)) != len(out):
        raise InputError("features must be distinct column indices of bins")
    return out


def build_histogram(
    public_key: AnyPublicKey,
    bins: npt.NDArray[np.integer[Any]],
    n_bins: int,
    ciphertexts: Sequence[Sequence[Any]],
    rows: npt.NDArray[np.integer[Any]] | None = None,
    *,
    zero_bins: npt.NDArray[np.integer[Any]] | None = None,
    features: npt.NDArray[np.integer[Any]] | None = None,
) -> EncryptedHistogram:
    """Histogram of the ``rows`` of ``bins`` (all rows when None).

    ``features`` (default: all) are the columns accumulated; the others keep empty cells
    (the encryption of 0 and zero counts) and cost nothing: column sampling saves a host the
    additions of every feature a tree does not use.

    ``bins`` is the ``(n_rows, n_features)`` uint8/uint16 bin matrix; ``ciphertexts[p][i]`` is
    plane ``p`` of row ``i`` (indexed like ``bins``: for a chunk, pass the chunk's bins and
    ciphertexts). ``zero_bins[f]``, when given and ``>= 0``, names the bin of feature ``f`` that
    is derived from the node total instead of summed (its rows are skipped: sparse data).
    """
    if bins.ndim != 2 or bins.dtype.kind != "u":
        raise InputError("bins must be a 2-d unsigned integer matrix (rows x features)")
    n_rows, n_features = bins.shape
    if not 1 <= n_bins <= 1 << 16:
        raise InputError("n_bins must be in [1, 65536]")
    if not ciphertexts or any(len(plane) != n_rows for plane in ciphertexts):
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

    n2 = public_key.modulus
    counts = np.zeros((n_features, n_bins), dtype=np.int64)
    planes: tuple[list[Any], ...] = tuple([_ONE] * (n_features * n_bins) for _ in ciphertexts)
    used = range(n_features) if features is None else _feature_list(features, n_features)
    made = 0
    totals: list[Any] | None = None
    if any(zb[f] >= 0 for f in used):  # the node total, once for every derived bin
        ids_all = idx.tolist()
        totals = [product([plane[i] for i in ids_all], n2) for plane in ciphertexts]
        made += len(ciphertexts) * max(0, len(ids_all) - 1)

    derived: list[tuple[int, int, Any]] = []  # (plane, cell, product of the other bins)
    for f in used:
        col = sub[:, f]
        ids = idx
        if zb[f] >= 0:
            keep = col != zb[f]
            col, ids = col[keep], idx[keep]
        order = np.argsort(col, kind="stable")
        cnt = np.bincount(col, minlength=n_bins)
        counts[f] = cnt
        sorted_ids = ids[order].tolist()
        cnt_list = cnt.tolist()
        base = f * n_bins
        made += len(ciphertexts) * (len(sorted_ids) - sum(1 for k in cnt_list if k))
        for plane, out in zip(ciphertexts, planes, strict=True):
            it = iter(sorted_ids)
            for b, k in enumerate(cnt_list):
                if k:
                    acc = plane[next(it)]
                    for i in islice(it, k - 1):
                        acc = acc * plane[i] % n2
                    out[base + b] = acc
        if zb[f] >= 0 and totals is not None:
            z = int(zb[f])
            counts[f, z] = idx.size - int(cnt.sum())
            occupied = [base + b for b, k in enumerate(cnt_list) if k]
            for p, out in enumerate(planes):
                derived.append((p, base + z, product([out[i] for i in occupied], n2)))
            made += len(ciphertexts) * len(occupied)  # the others' product and the division
    if derived and totals is not None:  # every derived bin's division with one inversion
        inverses = batch_invert([others for _, _, others in derived], n2)
        for (p, cell, _), inv in zip(derived, inverses, strict=True):
            planes[p][cell] = totals[p] * inv % n2
    _PRODUCTS[0] += made
    return EncryptedHistogram(public_key, n_bins, counts, planes)
