"""Host-side ciphertext work of hetero SecureBoost: pure functions run in a process pool.

Everything here is synchronous and picklable (module-level functions on numpy arrays, gmpy2
integers and :class:`~p2pboost.crypto.histogram.EncryptedHistogram` values), so
:mod:`p2pboost.hetero.train` can hand it to worker processes and keep the event loop
free. A host splits its features into groups, one task per group, so the cores share a layer.

Candidate enumeration (:func:`candidate_sums`) follows the plaintext core's split rule exactly
(:func:`p2pboost.gbdt.split.find_best_splits`): candidate ``(feature, bin, direction)`` sends
value bins ``<= bin`` left, and missing values left for direction 0 ("missing left") or right
for direction 1. Three kinds of candidates are *not* sent, none of which can change the core's
choice:

* a side with fewer than ``min_rows`` rows (with ``min_rows >= 1``, an empty side: its gain is
  exactly 0 or the candidate is invalid, and a split needs a gain above ``MIN_GAIN > 0``);
* direction 1 of a feature without missing values in the node (same sums as direction 0,
  which the core prefers on ties);
* a bin ``t > 0`` holding no row of the node: same left set (hence same sums and gain) as
  ``t - 1``, which the core prefers on ties.

That also cuts the guest's decryptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.histogram import EncryptedHistogram, build_histogram
from p2pboost.crypto.paillier import PublicKey

__all__ = ["Candidates", "candidate_sums", "child_histograms", "chunk_histogram"]

I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.unsignedinteger[Any]]


@dataclass(frozen=True, eq=False)
class Candidates:
    """Split candidates of one node over one feature group, in (feature, bin, direction) order.

    ``feature`` is local to the group; ``sums[i]`` is the ciphertext of the packed left sums of
    candidate ``i`` over ``counts[i]`` (sampled) rows.
    """

    feature: I64
    bin: I64
    default_left: B8
    counts: I64
    sums: list[Any]


def chunk_histogram(
    public_key: PublicKey, codes: Codes, n_slots: int, ciphertexts: list[Any]
) -> EncryptedHistogram:
    """Histogram of one streamed chunk: ``codes`` ``(rows, features)``, one ciphertext a row."""
    return build_histogram(public_key, codes, n_slots, [ciphertexts])


def child_histograms(
    parent: EncryptedHistogram, codes: Codes, ciphertexts: list[Any]
) -> tuple[EncryptedHistogram, EncryptedHistogram]:
    """The smaller child's histogram from its rows, and its sibling as ``parent - child``."""
    small = build_histogram(parent.public_key, codes, parent.n_bins, [ciphertexts])
    return small, parent.subtract(small)


def candidate_sums(hist: EncryptedHistogram, allowed: B8, min_rows: int) -> Candidates:
    """Candidates of a node (see the module docstring) with their encrypted left sums.

    ``hist`` has ``n_slots`` bins per feature, the last one for missing values; ``allowed``
    ``(features, n_slots - 1, 2)`` is the core's candidate mask (:func:`candidate_mask` and
    column sampling) for these features.
    """
    counts = hist.counts
    n_feat, n_slots = counts.shape
    if allowed.shape != (n_feat, n_slots - 1, 2):
        raise ValueError("candidate mask does not match the histogram")
    missing = counts[:, -1]
    total = counts.sum(axis=1)
    cum = np.cumsum(counts[:, :-1], axis=1)  # value bins 0..t
    t = np.arange(n_slots - 1)[None, :]
    new_set = (t == 0) | (counts[:, :-1] > 0)
    left = np.stack([cum + missing[:, None], cum], axis=-1)  # (F, T, 2): dir 0, dir 1
    ok = allowed & new_set[..., None]
    ok &= (left >= min_rows) & (total[:, None, None] - left >= min_rows)
    ok[..., 1] &= (missing > 0)[:, None]
    f, b, d = np.nonzero(ok)  # C order: sorted by (feature, bin, direction)
    n2 = hist.public_key.n2
    plane = hist.planes[0]
    cumulative: list[Any] = []
    for feat in range(n_feat):  # prefix products per feature (only where needed)
        base = feat * n_slots
        last = int(b[f == feat].max()) if np.any(f == feat) else -1
        acc = plane[base]
        row = [acc]
        for i in range(1, last + 1):
            acc = acc * plane[base + i] % n2
            row.append(acc)
        cumulative.append(row)
    sums = []
    for feat, bin_, direction in zip(f.tolist(), b.tolist(), d.tolist(), strict=True):
        s = cumulative[feat][bin_]
        if direction == 0 and missing[feat] > 0:
            s = s * plane[feat * n_slots + n_slots - 1] % n2
        sums.append(s)
    return Candidates(
        feature=f.astype(np.int64),
        bin=b.astype(np.int64),
        default_left=d == 0,
        counts=left[f, b, d].astype(np.int64),
        sums=sums,
    )
