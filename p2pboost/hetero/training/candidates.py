"""Candidate arithmetic of a host's node: which splits it offers, their partial sums, and
which bin of a feature it derives instead of summing.

Pure functions on numpy arrays and encrypted histograms, run inside a shard's worker
(:mod:`p2pboost.hetero.training.shards`) and by the tests against the plaintext core.

Candidate enumeration (:func:`node_candidates`) follows the plaintext core's split rule exactly
(:func:`p2pboost.gbdt.split.find_best_splits`): candidate ``(feature, bin, direction)`` sends
value bins ``<= bin`` left, and missing values left for direction 0 ("missing left") or right
for direction 1. Three kinds of candidates are *not* sent, none of which can change the core's
choice:

* a side with fewer than ``min_rows`` rows (with ``min_rows >= 1``, an empty side: its gain is
  exactly 0 or the candidate is invalid, and a split needs a gain above ``MIN_GAIN > 0``;
  more generally, fewer rows than ``min_samples_leaf`` or than the tree's hessian bound
  allows for ``min_child_weight``: :func:`~p2pboost.gbdt.split.min_child_rows`);
* direction 1 of a feature without missing values in the node (same sums as direction 0,
  which the core prefers on ties);
* a bin ``t > 0`` holding no row of the node: same left set (hence same sums and gain) as
  ``t - 1``, which the core prefers on ties.

That also cuts the guest's decryptions.

**The sparse-bin heuristic** (:func:`sparse_zero_bins`): a feature's most frequent bin can be
derived from the node total rather than summed, which pays on sparse data; which features take
part is decided once per run from the host's bins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto import kernels
from p2pboost.crypto.histogram import EncryptedHistogram
from p2pboost.crypto.residues import Residues

__all__ = [
    "SPARSE_SHARE",
    "NodeCandidates",
    "candidate_sums",
    "listed",
    "node_candidates",
    "node_counts",
    "offered",
    "sparse_zero_bins",
]

I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.unsignedinteger[Any]]


@dataclass(frozen=True, eq=False)
class NodeCandidates:
    """Split candidates of one node, in (feature, bin, direction) order, with one shard's
    partial left sums: ``sums`` holds a candidate's ciphertexts (one per plane of a packed
    row) after another's, fixed-width big-endian."""

    feature: I64
    bin: I64
    default_left: B8
    counts: I64
    sums: bytes

    def __len__(self) -> int:
        return int(self.feature.size)


def node_counts(codes: Codes, n_slots: int) -> I64:
    """Rows per (feature, slot) of ``codes`` ``(rows, features)``: shape ``(features, n_slots)``."""
    n_feat = codes.shape[1]
    keys = codes.astype(np.int64) + np.arange(n_feat, dtype=np.int64) * n_slots
    return np.bincount(keys.ravel(), minlength=n_feat * n_slots).reshape(n_feat, n_slots)


def node_candidates(
    counts: I64, allowed: B8, min_rows: int, also: B8 | None = None
) -> tuple[I64, I64, B8, I64]:
    """``(feature, bin, default_left, left_count)`` of a node's candidates (module docstring).

    ``counts`` ``(features, n_slots)`` are the node's rows per bin, the last slot for missing
    values; ``allowed`` ``(features, n_slots - 1, 2)`` is the core's candidate mask
    (:func:`~p2pboost.gbdt.split.candidate_mask` and column sampling). ``min_rows <= 0``: a
    differentially private run's candidates, every one of ``allowed`` (a choice among the
    candidates the data leave would depend on the data: :mod:`p2pboost.gbdt.privacy`).
    ``also``: candidates offered as well (a split's smaller child also carries its sibling's,
    whose sums the guest derives from them: :func:`~p2pboost.hetero.training.shards.shard_split`).
    """
    ok, left = offered(counts, allowed, min_rows)
    if also is not None:
        ok |= also
    return listed(ok, left)


def listed(ok: B8, left: I64) -> tuple[I64, I64, B8, I64]:
    """The candidates of mask ``ok`` as ``(feature, bin, default_left, left_count)``."""
    f, b, d = np.nonzero(ok)  # C order: sorted by (feature, bin, direction)
    return (
        f.astype(np.int64),
        b.astype(np.int64),
        d == 0,
        left[f, b, d].astype(np.int64),
    )


def offered(counts: I64, allowed: B8, min_rows: int) -> tuple[B8, I64]:
    """The mask of a node's candidates ``(features, n_slots - 1, 2)`` and every candidate's
    left row count (same shape)."""
    n_feat, n_slots = counts.shape
    if allowed.shape != (n_feat, n_slots - 1, 2):
        raise ValueError("candidate mask does not match the histogram")
    missing = counts[:, -1]
    total = counts.sum(axis=1)
    cum = np.cumsum(counts[:, :-1], axis=1)  # value bins 0..t
    t = np.arange(n_slots - 1)[None, :]
    new_set = (t == 0) | (counts[:, :-1] > 0)
    left = np.stack([cum + missing[:, None], cum], axis=-1)  # (F, T, 2): dir 0, dir 1
    if min_rows <= 0:
        return allowed.copy(), left
    ok = allowed & new_set[..., None]
    ok &= (left >= min_rows) & (total[:, None, None] - left >= min_rows)
    ok[..., 1] &= (missing > 0)[:, None]
    return ok, left


def candidate_sums(
    hist: EncryptedHistogram, feature: I64, bin_: I64, default_left: B8, missing: I64
) -> bytes:
    """Encrypted left sums of candidates over the rows of ``hist``: each candidate's
    ciphertexts, one per plane, after the previous candidate's, as fixed-width bytes.

    Prefix sums over the value bins (:meth:`EncryptedHistogram.cumulative`), times the missing
    slot for "missing left" where the node (``missing[f]``: all shards' rows) has missing values:
    one :func:`~p2pboost.crypto.kernels.segment_products` call per plane over the prefix sums
    and the cells side by side, a candidate being a segment of one or two of them.
    """
    mod, n_slots = hist.public_key.modulus, hist.n_bins
    width = hist.public_key.ciphertext_bytes
    n = int(feature.size)
    cells = feature * n_slots + bin_
    need = default_left & (missing[feature] > 0)
    sizes = 1 + need.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    index = np.empty(int(offsets[-1]), dtype=np.int64)
    index[offsets[:-1]] = cells
    n_cells = hist.n_features * n_slots
    index[offsets[:-1][need] + 1] = n_cells + feature[need] * n_slots + n_slots - 1
    cumulative = hist.cumulative()
    planes = [
        kernels.segment_products(mod, Residues.concat([c, p], width), index, offsets)
        for c, p in zip(cumulative.planes, hist.planes, strict=True)
    ]
    if len(planes) == 1:
        return planes[0].data
    rows = [np.frombuffer(p.data, dtype=np.uint8).reshape(n, width) for p in planes]
    return np.stack(rows, axis=1).tobytes()  # a candidate's planes are consecutive


#: A feature's most frequent bin is derived from the node total (not summed) when it holds at
#: least this share of the rows: then it saves more additions than its share of the total costs.
SPARSE_SHARE = 0.5


def sparse_zero_bins(codes: Codes, n_slots: int, share: float = SPARSE_SHARE) -> I64:
    """Per feature, the bin to derive from the node total instead of summing it (sparse data:
    SecureBoost+ section 6), or -1.

    Summing a node's histogram costs one ciphertext addition per row and feature. Deriving the
    most frequent bin of a feature as the node total minus the feature's other bins skips that
    bin's rows, at the price of the node total (one addition per row, shared by every such
    feature) and a few products and one inversion per feature. So a feature takes part when
    its most frequent bin holds at least :data:`SPARSE_SHARE` of the rows, and only if the
    features that do save more rows together than the total costs (``share=0``: every
    feature). Trees do not change: the derived cell is exactly the product of that bin's
    ciphertexts.
    """
    n_rows, n_features = codes.shape
    zero = np.full(n_features, -1, dtype=np.int64)
    if n_rows == 0:
        return zero
    shares = np.zeros(n_features)
    for f in range(n_features):
        counts = np.bincount(codes[:, f], minlength=n_slots)
        zero[f] = int(counts.argmax())
        shares[f] = counts[zero[f]] / n_rows
    if share <= 0.0:  # asked for every feature
        return zero
    sparse = shares >= share
    if shares[sparse].sum() <= 1.0:
        return np.full(n_features, -1, dtype=np.int64)
    return np.where(sparse, zero, -1)
