"""Split finding: pure functions on (possibly decrypted) gradient sums.

The federated guest calls these on sums it decrypted from hosts, so everything here takes
plain arrays and returns plain arrays, with no knowledge of where the sums came from.

Gain (XGBoost's ``loss_chg``; SecureBoost+ eq. 17-19 for vector leaves, summed over outputs)::

    gain = sum_k [ GL_k^2 / (HL_k + lambda) + GR_k^2 / (HR_k + lambda) - G_k^2 / (H_k + lambda) ]

This is the number XGBoost's code compares with ``gamma`` (``min_split_loss``): twice the
XGBoost paper's structure-score gain, without the ``- gamma`` term. One difference: XGBoost
grows and then prunes splits whose gain is below ``gamma`` bottom-up; here ``gamma`` is applied
when a split is made (a layer-wise federated protocol cannot revisit a layer). With the default
``gamma = 0`` the two agree.

A node is split only if its best gain exceeds ``max(gamma, MIN_GAIN)``; both children must have
every output's hessian sum ``>= min_child_weight`` and, when counts are known, at least
``min_samples_leaf`` rows. Leaf weight: ``w_k = -G_k / (H_k + lambda)`` (0 if ``H_k`` is below
``min_child_weight``, as XGBoost).

Candidates of a node are enumerated in the order (feature, threshold bin, missing direction),
missing-left before missing-right; the best is the first candidate with the highest gain
(``np.argmax``). So ties go to the lowest global feature index, then the lowest bin, then
missing-goes-left. Global feature order is guest features then host features, which lets the
federated guest reproduce the choice exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.gbdt.constraints import MonotoneNodes, monotone_split_gains
from p2pboost.gbdt.histogram import Histogram
from p2pboost.gbdt.params import BoostParams

__all__ = [
    "MIN_GAIN",
    "LayerSplits",
    "accepted",
    "candidate_mask",
    "find_best_splits",
    "leaf_weight",
    "min_child_rows",
    "no_splits",
    "split_gains",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: Gains at or below this never split (XGBoost's ``kRtEps``): guards against rounding noise.
MIN_GAIN = 1e-6


def split_gains(GL: F64, HL: F64, G: F64, H: F64, reg_lambda: float) -> F64:
    """Gain of candidate splits from left sums and node totals; the last axis is outputs.

    ``GL``/``HL`` and ``G``/``H`` broadcast against each other; the result drops the last axis.
    :func:`find_best_splits` computes exactly these numbers (same operations, same order).
    """
    shape = np.broadcast_shapes(np.shape(GL), np.shape(HL), np.shape(G), np.shape(H))
    GL, HL = np.broadcast_to(GL, shape), np.broadcast_to(HL, shape)
    GR = np.subtract(G, GL)
    HR = np.subtract(H, HL)
    return _children_score(GL, HL, GR, HR, reg_lambda) - _node_score(G, H, reg_lambda)


def _node_score(G: F64, H: F64, reg_lambda: float) -> F64:
    """``sum_k G_k^2 / (H_k + lambda)`` (the last axis is outputs)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((G * G / (H + reg_lambda)).sum(axis=-1))


def _children_score(GL: F64, HL: F64, GR: F64, HR: F64, reg_lambda: float) -> F64:
    """``sum_k GL^2 / (HL + lambda) + GR^2 / (HR + lambda)``; consumes ``GR`` and ``HR``.

    In place where possible: these arrays are the largest of split finding.
    """
    # Empty or hessian-free children with lambda = 0 give 0/0; min_child_weight masks those
    # candidates, so the NaN never wins.
    with np.errstate(divide="ignore", invalid="ignore"):
        left = GL * GL
        left /= HL + reg_lambda
        GR *= GR
        HR += reg_lambda
        GR /= HR
        left += GR
    return np.asarray(left.sum(axis=-1))


def accepted(gain: F64, params: BoostParams) -> I64:
    """Positions of the nodes whose best gain beats ``max(gamma, MIN_GAIN)``: they split.

    The one acceptance rule: the grower applies it, and the federated guest applies it to
    know which owners to ask before the layer is applied. A differentially private tree
    (``params.dp``) splits every node that has a chosen candidate (its gains are not released;
    :mod:`~p2pboost.gbdt.privacy`).
    """
    if params.dp is not None:
        return np.flatnonzero(np.isfinite(np.asarray(gain)))
    return np.flatnonzero(np.asarray(gain) > max(params.gamma, MIN_GAIN))


def leaf_weight(G: F64, H: F64, reg_lambda: float, min_child_weight: float) -> F64:
    """Newton leaf weight per output, ``-G / (H + lambda)``; 0 where ``H < min_child_weight``."""
    G = np.asarray(G, dtype=np.float64)
    H = np.asarray(H, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -G / (H + reg_lambda)
    return np.asarray(np.where((H < min_child_weight) | (H + reg_lambda <= 0), 0.0, w))


def candidate_mask(n_bins: I64, n_value_bins: int) -> B8:
    """Which (feature, threshold, direction) candidates exist: shape ``(F, n_value_bins, 2)``.

    Threshold ``t`` sends value bins ``<= t`` left. ``t <= n_bins[f] - 2`` is a real cut in both
    directions; ``t = n_bins[f] - 1`` with missing going right separates missing from present.
    Direction 0 is missing-left, 1 missing-right.
    """
    t = np.arange(n_value_bins)[None, :]
    nb = np.asarray(n_bins)[:, None]
    both = t <= nb - 2
    return np.stack([both, both | (t == nb - 1)], axis=-1)


def min_child_rows(min_samples_leaf: int, min_child_weight: float, hess_magnitude_bits: int) -> int:
    """The fewest rows a child can have and still be valid, from counts alone.

    A child needs ``min_samples_leaf`` rows and, for every output, a hessian sum of at least
    ``min_child_weight``. When every row's hessian is at most ``2**hess_magnitude_bits`` (the
    bound of the tree's hessian grid, :class:`~p2pboost.gbdt.fixedpoint.Grid`), a child of
    ``c`` rows has a hessian sum of at most ``c * 2**hess_magnitude_bits``, so it is invalid if
    ``c < ceil(min_child_weight / 2**hess_magnitude_bits)``. Why it matters: a vertical host
    knows its candidates' row counts but not their hessians; with this bound it leaves out
    candidates the core would reject anyway (the logistic loss's hessians are at most 1/4, so
    with XGBoost's default ``min_child_weight = 1`` a child needs 4 rows), which saves the
    host their compression and the guest their decryption without changing any tree.
    """
    try:
        needed = math.ldexp(min_child_weight, -hess_magnitude_bits)
    except OverflowError:
        needed = math.inf
    by_hessian = math.ceil(needed) if needed < 2.0**62 else 1 << 62  # tiny hessians: no child
    return max(min_samples_leaf, by_hessian)


@dataclass(frozen=True, slots=True, eq=False)
class LayerSplits:
    """The best split of each of ``k`` nodes (``gain = -inf`` if a node has none).

    ``left_grad``/``left_hess`` ``(k, K)`` and ``left_count`` ``(k,)`` (-1 if unknown) are the
    left child's sums, so the caller gets both children's totals without touching rows.
    """

    gain: F64
    feature: I64
    threshold: I64
    default_left: B8
    left_grad: F64
    left_hess: F64
    left_count: I64
    owner: I64 | None = None
    #: Each split's feature in the global order of the constraints (None: ``feature`` where
    #: the split is local, else unknown), for a party that knows which of another party's
    #: features a split uses (:class:`~p2pboost.gbdt.constraints.TreeConstraints`).
    global_feature: I64 | None = None


def no_splits(k: int, k_out: int) -> LayerSplits:
    """The answer for ``k`` nodes none of which has a candidate."""
    return LayerSplits(
        gain=np.full(k, -np.inf),
        feature=np.zeros(k, dtype=np.int64),
        threshold=np.zeros(k, dtype=np.int64),
        default_left=np.ones(k, dtype=np.bool_),
        left_grad=np.zeros((k, k_out)),
        left_hess=np.zeros((k, k_out)),
        left_count=np.full(k, -1, dtype=np.int64),
    )


def find_best_splits(
    hist: Histogram,
    node_grad: F64,
    node_hess: F64,
    node_count: I64 | None,
    candidates: B8,
    params: BoostParams,
    monotone: MonotoneNodes | None = None,
) -> LayerSplits:
    """Best split of every node of a layer, all nodes at once.

    ``hist`` holds ``k`` nodes' histograms (last bin of each feature = missing);
    ``node_grad``/``node_hess`` ``(k, K)`` are the nodes' totals; ``candidates``
    ``(F, B-1, 2)`` masks allowed candidates (see :func:`candidate_mask`; column subsampling
    clears whole features), or ``(k, F, B-1, 2)`` per node (``colsample_bynode``, interaction
    constraints). ``monotone`` (the nodes' weights and bounds under monotone constraints)
    replaces the gains by :func:`~p2pboost.gbdt.constraints.monotone_split_gains`.
    """
    k, n_feat, n_slots, k_out = hist.grad.shape
    if n_feat == 0:  # no feature (a vertical guest that holds only labels): no candidate
        return no_splits(k, k_out)
    n_thr = n_slots - 1
    # With no missing value in any node of the layer (all missing bins exactly 0), both
    # directions give identical sums, so only missing-left (which wins ties) is evaluated.
    has_missing = bool(hist.grad[:, :, -1].any() or hist.hess[:, :, -1].any()) or (
        hist.count is not None and bool(hist.count[:, :, -1].any())
    )
    n_dir = 2 if has_missing else 1
    # Left sums: cumulative value-bin sums; direction 0 adds the missing bin.
    gl = np.empty((k, n_feat, n_thr, n_dir, k_out))
    hl = np.empty((k, n_feat, n_thr, n_dir, k_out))
    np.cumsum(hist.grad[:, :, :-1, :], axis=2, out=gl[:, :, :, n_dir - 1, :])
    np.cumsum(hist.hess[:, :, :-1, :], axis=2, out=hl[:, :, :, n_dir - 1, :])
    if has_missing:
        np.add(gl[:, :, :, 1, :], hist.grad[:, :, -1:, :], out=gl[:, :, :, 0, :])
        np.add(hl[:, :, :, 1, :], hist.hess[:, :, -1:, :], out=hl[:, :, :, 0, :])
    else:
        candidates = candidates[..., :1]
    lam, mcw = params.reg_lambda, params.min_child_weight
    gr = node_grad[:, None, None, None, :] - gl
    hr = node_hess[:, None, None, None, :] - hl
    if k_out == 1:
        valid = (hl[..., 0] >= mcw) & (hr[..., 0] >= mcw)
    else:
        valid = np.all(hl >= mcw, axis=-1) & np.all(hr >= mcw, axis=-1)
    if monotone is None:
        parent = _node_score(node_grad, node_hess, lam)[:, None, None, None]
        gains = _children_score(gl, hl, gr, hr, lam)  # (k, F, B-1, n_dir)
        gains -= parent
    else:
        at = (slice(None), None, None, None)
        gains = monotone_split_gains(
            gl,
            hl,
            gr,
            hr,
            monotone.weight[at],
            monotone.lower[at],
            monotone.upper[at],
            monotone.direction[None, :, None, None],
            lam,
            mcw,
        )
    valid &= candidates if candidates.ndim == 4 else candidates[None]
    cl: I64 | None = None
    if hist.count is not None and node_count is not None:
        cl = np.empty((k, n_feat, n_thr, n_dir), dtype=np.int64)
        np.cumsum(hist.count[:, :, :-1], axis=2, out=cl[:, :, :, n_dir - 1])
        if has_missing:
            np.add(cl[:, :, :, 1], hist.count[:, :, -1:], out=cl[:, :, :, 0])
        msl = params.min_samples_leaf
        valid &= (cl >= msl) & (node_count[:, None, None, None] - cl >= msl)
    gains[~valid] = -np.inf

    flat = gains.reshape(k, -1)
    best = np.argmax(flat, axis=1)
    rows = np.arange(k)
    f, t, d = np.unravel_index(best, gains.shape[1:])
    return LayerSplits(
        gain=flat[rows, best],
        feature=f.astype(np.int64),
        threshold=t.astype(np.int64),
        default_left=d == 0,
        left_grad=gl[rows, f, t, d],
        left_hess=hl[rows, f, t, d],
        left_count=(
            cl[rows, f, t, d].astype(np.int64) if cl is not None else np.full(k, -1, np.int64)
        ),
    )
