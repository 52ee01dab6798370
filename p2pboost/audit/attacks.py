"""The attacks of ``p2pboost audit`` and ``python -m benchmarks attacks``, as pure functions of
what a party holds (numpy only: the library does not need scikit-learn or scipy for them).

Label inference from instance spaces (the host's attack). Rows that fall into the same nodes,
tree after tree, had similar gradients, hence similar labels: the instance-clustering attack
of arXiv 2404.04490 groups rows by that co-occurrence, ID2Graph (arXiv 2307.10318) makes it a
graph (rows as vertices, an edge per shared node) and propagates the few labels the attacker
knows. :func:`propagate_labels` is the graph form: every observed row set is a hyper-edge, and
each step gives a row the mean, over the sets it belongs to, of the sets' mean current
labels, the known rows clamped to their labels. A row that shares many small sets with known
positives climbs; one that shares sets with nobody known stays at the prior. The same code
given random row sets of the same sizes (:func:`random_like`) is the control: it must land
at an AUC of about 0.5, or the attack reads something other than the sets.

Feature order from inference bits (the guest's attack). Splits of one host feature at
different thresholds send nested row sets left (``x <= a`` within ``x <= b`` for ``a < b``),
splits of different features almost never do. :func:`nesting_groups` joins splits whose left
sets nest (union-find over the pairs), and :func:`order_by_bits` ranks each row by how many
splits of the largest group send it right: the number of that feature's thresholds below its
value, its value at the model's bin resolution.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "auc",
    "cross_fitted",
    "logistic_scores",
    "nesting_groups",
    "order_by_bits",
    "propagate_labels",
    "random_like",
    "ranks",
    "spearman",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: Label propagation steps: the scores settle in a few (each step averages over the sets).
STEPS = 8


def ranks(a: npt.ArrayLike) -> F64:
    """1-based ranks, ties given their average rank."""
    x = np.asarray(a, dtype=np.float64).ravel()
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], x.size]
    average = (starts + ends + 1) / 2.0  # mean of the 1-based positions start+1 .. end
    out = np.empty(x.size)
    out[order] = np.repeat(average, ends - starts)
    return out


def auc(y: npt.ArrayLike, score: npt.ArrayLike) -> float:
    """ROC AUC with ties counted half (the rank form, Mann-Whitney); 0.5 with one class."""
    labels = np.asarray(y).ravel() > 0.5
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return 0.5
    r = ranks(score)
    return float((r[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def spearman(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Spearman's rank correlation, ties averaged; 0 when either side is constant."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def logistic_scores(
    X_fit: F64, y_fit: npt.ArrayLike, X_score: F64, l2: float = 1.0, steps: int = 50
) -> F64:
    """Probabilities on ``X_score`` of an L2-penalised logistic regression fitted on
    ``(X_fit, y_fit)`` with standardised columns (the loss summed over rows plus
    ``l2 / 2 * |w|^2``, intercept free: scikit-learn's default), by Newton's method."""
    mean = X_fit.mean(axis=0)
    scale = X_fit.std(axis=0)
    scale[scale == 0] = 1.0
    Z = np.c_[np.ones(X_fit.shape[0]), (X_fit - mean) / scale]
    t = np.asarray(y_fit, dtype=np.float64).ravel()
    w = np.zeros(Z.shape[1])
    penalty = np.full(Z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -35, 35)))
        grad = Z.T @ (p - t) + penalty * w
        hess = (Z * (p * (1 - p))[:, None]).T @ Z + np.diag(penalty) + 1e-9 * np.eye(w.size)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    Zs = np.c_[np.ones(X_score.shape[0]), (X_score - mean) / scale]
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(Zs @ w, -35, 35))), dtype=np.float64)


def _membership(groups: Sequence[I64]) -> tuple[I64, I64]:
    """Every (row, set) pair of the row sets, as two parallel arrays."""
    sizes = np.array([g.size for g in groups], dtype=np.int64)
    rows = np.concatenate([*groups, np.empty(0, np.int64)]).astype(np.int64)
    return rows, np.repeat(np.arange(sizes.size), sizes)


def propagate_labels(
    groups: Sequence[I64], n: int, known: I64, y_known: F64, steps: int = STEPS
) -> F64:
    """A score per row from the labels of the ``known`` rows, spread over the row sets
    ``groups`` (module docstring); higher means more likely positive."""
    prior = float(np.mean(y_known)) if y_known.size else 0.0
    f = np.full(n, prior)
    f[known] = y_known
    rows, cols = _membership(groups)
    n_sets = max(len(groups), 1)
    size = np.bincount(cols, minlength=n_sets).astype(np.float64)
    degree = np.bincount(rows, minlength=n).astype(np.float64)
    size[size == 0] = 1.0
    alone = degree == 0
    degree[alone] = 1.0
    for _ in range(steps):
        group_mean = np.bincount(cols, weights=f[rows], minlength=n_sets) / size
        f = np.bincount(rows, weights=group_mean[cols], minlength=n) / degree
        f[alone] = prior
        f[known] = y_known
    return f


def cross_fitted(
    groups: Sequence[I64], n: int, known: I64, y_known: F64, folds: int = 5, seed: int = 0
) -> F64:
    """:func:`propagate_labels` scores where each known row's score comes from the other
    folds' labels (its own would be clamped to its label): what a second-stage model may be
    trained on without learning the clamp."""
    score = propagate_labels(groups, n, known, y_known)
    fold = np.random.default_rng(seed).permutation(known.size) % folds
    for f in range(folds):
        held = fold == f
        if held.all():
            continue
        part = propagate_labels(groups, n, known[~held], y_known[~held])
        score[known[held]] = part[known[held]]
    return score


def random_like(groups_by_tree: Sequence[Sequence[I64]], n: int, seed: int) -> list[I64]:
    """The control's row sets: each tree's sets with the rows renamed by a random
    permutation of its own, so every size and every nesting stays and nothing else does."""
    rng = np.random.default_rng(seed)
    out: list[I64] = []
    for groups in groups_by_tree:
        perm = rng.permutation(n)
        out += [perm[g] for g in groups]
    return out


def nesting_groups(bits: B8, min_side: int) -> list[list[int]]:
    """Splits (rows of ``bits``: go-left per row) joined when their left sets nest; a split
    whose smaller side has fewer than ``min_side`` rows is left out (a tiny set nests in
    anything by chance). Largest group first."""
    n = bits.shape[1]
    left = bits.sum(axis=1)
    usable = np.flatnonzero(np.minimum(left, n - left) >= min_side)
    if usable.size == 0:
        return []
    B = bits[usable].astype(np.float32)
    inter = B @ B.T  # exact: counts below 2**24
    size = left[usable].astype(np.float32)
    nested = (inter == size[:, None]) | (inter == size[None, :])
    parent = list(range(usable.size))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in zip(*np.nonzero(np.triu(nested, 1)), strict=True):
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[rb] = ra
    members: dict[int, list[int]] = {}
    for k in range(usable.size):
        members.setdefault(find(k), []).append(int(usable[k]))
    return sorted(members.values(), key=len, reverse=True)


def order_by_bits(bits: B8, group: Sequence[int]) -> F64:
    """Each row's count of the group's splits that send it right (its rank by the feature)."""
    if not group:
        return np.zeros(bits.shape[1])
    return np.asarray((~bits[list(group)]).sum(axis=0), dtype=np.float64)
