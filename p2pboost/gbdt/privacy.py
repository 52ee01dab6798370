"""DPBoost: differentially private gradient boosting (Li, Wu, Wen and He, AAAI 2020).

What is protected: the *released model* (trees, thresholds, leaf values, its history of the
training rows), against anyone who reads it, for neighbouring training sets that differ in one
row. How (``BoostParams.dp``, a :class:`~p2pboost.gbdt.params.DPParams`):

* **Bounded gradients.** The loss's gradient at margin 0 is at most ``g*`` over the allowed
  labels (0.5 for the logistic loss; the label bound for squared error). Hessians are taken as
  1 per row (first-order trees, as in the paper: a Newton step's hessian denominator would
  make a leaf's sensitivity unbounded). *Gradient-based data filtering* (GDF) lets a row whose
  gradient later exceeds ``g*`` sit that tree out; without GDF its gradient is clipped.
* **Sensitivities independent of the data size.** A split's score
  ``G = GL^2/(nL+lambda) + GR^2/(nR+lambda)`` moves by at most ``Delta_G = 3 g*^2`` (one row
  enters one child: ``(S + g)^2/(n+1+lambda) - S^2/(n+lambda)`` tends to ``-3 g*^2`` for
  ``S = n g*``, ``g = -g*`` and large ``n``; the paper's first ``(3 lambda + 2) / ((lambda +
  1)(lambda + 2)) g*^2`` is only the ``n = 1`` case, and its authors' code moved to
  ``3 g*^2``) and a leaf value ``V = -sum g / (n + lambda)`` by at most
  ``Delta_V = g* / (1 + lambda)``; with *geometric
  leaf clipping* (GLC) the t-th tree of an ensemble clips its leaves to
  ``g* (1 - eta)^(t-1)``, so ``Delta_V <= min(g* / (1 + lambda), 2 g* (1 - eta)^(t-1))``.
* **One tree with budget eps_t:** half to the leaves (Laplace noise, scale
  ``Delta_V / (eps_t / 2)``, by the snapping mechanism of :mod:`~p2pboost.gbdt.noise`), half
  spread evenly over the ``max_depth`` levels; at a level every node chooses its split by the
  exponential mechanism (probability ``~ exp(eps_level G / (2 Delta_G))``) among *all*
  candidates of the fixed candidate grid (a data-dependent candidate set would leak). Nodes of
  a level hold disjoint rows (parallel composition). Trees are full: no early stop on gains
  or counts; gains and covers are not stored in the model, internal nodes carry no value.
* **Across trees** (:class:`~p2pboost.gbdt.params.DPMechanism`): DPBoost's ensemble of
  ensembles (ensembles of ``T_e`` trees on disjoint rows, sizes ``eta (1 - eta)^(t-1) /
  (1 - (1 - eta)^T_e)`` of the rows; ensembles in sequence), or the baselines SEQ and PARA.

Rows are assigned to the trees of an ensemble by one uniform key per row, drawn at the start
of the ensemble (:class:`PrivateRounds`); a row belongs to the tree whose share of [0, 1)
holds its key. The assignment is independent of the data, so the trees of an ensemble see
disjoint rows; and it is per row, so a horizontal client can draw its own rows' keys.

With GDF and shares (DPBoost and PARA), a row that a tree filters out is not consumed: it is
*carried* to the ensemble's next tree, which takes it with its own share's rows and filters it
again, until a tree uses it or the ensemble ends (then it is dropped; the next ensemble draws
new keys and starts with nothing carried), as in DPBoost's reference implementations. This
keeps the ensemble's parallel composition, for the neighbouring the sensitivities assume (one
row added or removed), and so the accountant's epsilon:

* the tree that filters a row does not depend on it (the filter reads that row's gradient
  alone, given the model so far, and the row enters none of the tree's sums);
* whether a row is used, carried or dropped at a tree is a function of that row alone (its key
  and its gradient under the model so far): a carried row is *added* to a tree's rows and
  displaces none (shares are ranges of keys, not counts), so the rows any other tree takes do
  not depend on it;
* so, for any sequence of released trees, the trees of an ensemble on two neighbouring sets
  hold the same rows except one tree, which holds the extra row: a row is *used* by at most
  one tree of an ensemble, whose budget bounds its influence on all of them.

(Neighbours that differ by one row *replaced* are two such steps, one row removed and one
added, with or without carrying: the old row may be used by one tree and the new one by
another, as without carrying one tree may hold either.)

An ensemble's keys live only in the memory of the party that drew them. A horizontal client
that restarts mid-ensemble (the server takes it back and replays the model so far) has lost
them, and may not draw new ones: under other keys (fresh ones, or a seeded stream started
again) a row that an earlier tree of the ensemble used may fall in a later tree's share and
serve two trees, and the ensemble would no longer cost one tree's budget. So such a client
offers no rows to the rest of that ensemble and keys its rows again at the next ensemble's
first tree (:class:`KeyedRows`). Each row still serves at most one released tree of an
ensemble, and whether a client sits out depends on when its process restarted, not on any
row. A restart during an ensemble's first tree costs no rows: none of the ensemble's trees
was released, and the interrupted tree, if its choices were seen, is charged in full on top
(as after any dropout). Two other rules would be sound: keys derived again from a secret
kept for the run (fewer rows lost, but a client keeps no state across a restart, and would
have to store and guard one), or the server refusing the client's return (its rows lost for
the whole run, not for one ensemble).

The accountant (:func:`privacy_record`) states what the released model spent; the record
travels in the model file and ``p2pboost inspect`` shows it. It holds settings and budgets
only, nothing computed from the rows: how many rows the gradient filter left out
(:attr:`PrivateRounds.filtered_rows`) depends on the training rows (a neighbouring set
changes it) and is not covered by the guarantee, so only the party that trained sees it (the
trained model object's ``filtered_rows``, never written to its file).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.constraints import MonotoneNodes, clamped_weight, monotone_valid
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.gbdt.histogram import Histogram
from p2pboost.gbdt.noise import (
    NoiseSource,
    exponential_mechanism,
    snapped_laplace,
    snapping_epsilon,
)
from p2pboost.gbdt.objectives import canonical_objective
from p2pboost.gbdt.params import BoostParams, DPMechanism, DPParams
from p2pboost.gbdt.split import LayerSplits
from p2pboost.gbdt.tree import Tree

__all__ = [
    "KeyedRows",
    "PrivateRounds",
    "PrivateTree",
    "RowCarry",
    "RowKeys",
    "TreePlan",
    "TreeRows",
    "check_private_labels",
    "clip_on_grid",
    "constrained_scores",
    "gain_sensitivity",
    "grad_bound",
    "privacy_record",
    "split_scores",
    "tree_plan",
    "tree_rows",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
#: ``keys(ensemble, n_rows)``: the rows' uniform keys in [0, 1) for one ensemble.
RowKeys = Callable[[int, int], F64]


def _dp(params: BoostParams) -> DPParams:
    if params.dp is None:
        raise InputError("these parameters ask for no differential privacy (params.dp is None)")
    return params.dp


def grad_bound(params: BoostParams) -> float:
    """DPBoost's ``g*_l``: ``dp.grad_bound`` if set, else the loss's largest gradient at
    margin 0 over the allowed labels (0.5 logistic, ``label_bound`` squared error)."""
    dp = _dp(params)
    if dp.grad_bound is not None:
        return float(dp.grad_bound)
    return 0.5 if _logistic(params) else dp.label_bound


def _logistic(params: BoostParams) -> bool:
    return canonical_objective(params.objective) == "binary:logistic"


def check_private_labels(params: BoostParams, y: F64) -> None:
    """Squared error's sensitivity needs labels within ``[-label_bound, label_bound]``."""
    dp = _dp(params)
    if not _logistic(params):
        worst = float(np.max(np.abs(y))) if y.size else 0.0
        if worst > dp.label_bound:
            raise InputError(
                f"differential privacy needs regression labels in [-{dp.label_bound}, "
                f"{dp.label_bound}] (dp.label_bound), found |y| = {worst:g}: scale them with "
                "public bounds, e.g. (y - mid) / half_range"
            )


@dataclass(frozen=True, slots=True)
class TreePlan:
    """The privacy settings of one tree (all data-independent).

    ``lo``/``hi``: the share of [0, 1) whose row keys belong to this tree (None: all rows);
    ``last``: the last tree of its ensemble (rows it filters are not carried on).
    ``leaf_bound`` bounds ``|V|`` (GLC's clip, else ``g*``); ``delta_v``/``delta_g`` are the
    sensitivities; ``epsilon`` = ``leaf_epsilon`` + ``max_depth * level_epsilon``.
    """

    index: int
    ensemble: int
    position: int
    epsilon: float
    level_epsilon: float
    leaf_epsilon: float
    lo: float | None
    hi: float | None
    last: bool
    grad_bound: float
    leaf_bound: float
    delta_v: float
    delta_g: float


def _ensembles(params: BoostParams) -> tuple[int, float]:
    """``(trees per ensemble, epsilon per tree)``: SEQ and PARA are one ensemble of every
    tree (SEQ's trees share the rows, so they split the budget)."""
    dp = _dp(params)
    n_trees = params.n_estimators
    mech = DPMechanism(dp.mechanism)
    if mech is DPMechanism.SEQ:
        return n_trees, dp.epsilon / n_trees
    if mech is DPMechanism.PARA:
        return n_trees, dp.epsilon
    per = min(dp.trees_per_ensemble, n_trees)
    return per, dp.epsilon / math.ceil(n_trees / per)


def _shares(params: BoostParams, ensemble: int, per: int) -> list[float] | None:
    """The row shares of an ensemble's trees (None: every tree takes every row, SEQ)."""
    mech = DPMechanism(_dp(params).mechanism)
    if mech is DPMechanism.SEQ:
        return None
    if mech is DPMechanism.PARA:
        return [1.0 / per] * per
    m = min(per, params.n_estimators - ensemble * per)  # the last ensemble may be shorter
    return _geometric_shares(m, params.learning_rate)


def _geometric_shares(m: int, eta: float) -> list[float]:
    """DPBoost's Algorithm 2: tree t of m gets ``eta (1-eta)^(t-1) / (1 - (1-eta)^m)``."""
    q = 1.0 - eta
    if q <= 0.0:
        return [1.0] + [0.0] * (m - 1)
    total = 1.0 - q**m
    return [eta * q**t / total for t in range(m)]


def gain_sensitivity(grad_bound: float) -> float:
    """``Delta_G = 3 g*^2``: the most a split's score moves when one row changes, over every
    node size and whatever ``lambda`` (module docstring)."""
    return 3.0 * grad_bound * grad_bound


def tree_plan(params: BoostParams, index: int) -> TreePlan:
    """The plan of tree ``index`` (0-based, counting every tree of the model)."""
    dp = _dp(params)
    if not 0 <= index < params.n_estimators:
        raise InputError(f"tree {index} is not one of the model's {params.n_estimators}")
    per, eps = _ensembles(params)
    ensemble, position = divmod(index, per)
    shares = _shares(params, ensemble, per)
    lo = hi = None
    last = position == per - 1  # SEQ: one ensemble of every tree
    if shares is not None:
        lo, hi = float(sum(shares[:position])), float(sum(shares[: position + 1]))
        last = position == len(shares) - 1
        if last:
            hi = 1.0  # the last tree takes what rounding left
    g = grad_bound(params)
    lam = params.reg_lambda
    delta_v = g / (1.0 + lam)
    leaf_bound = g
    if dp.glc:
        leaf_bound = g * (1.0 - params.learning_rate) ** position
        delta_v = min(delta_v, 2.0 * leaf_bound)
    delta_g = gain_sensitivity(g)
    return TreePlan(
        index=index,
        ensemble=ensemble,
        position=position,
        epsilon=eps,
        level_epsilon=eps / 2.0 / params.max_depth,
        leaf_epsilon=eps / 2.0,
        lo=lo,
        hi=hi,
        last=last,
        grad_bound=g,
        leaf_bound=leaf_bound,
        delta_v=delta_v,
        delta_g=delta_g,
    )


@dataclass(frozen=True, slots=True)
class TreeRows:
    """What :func:`tree_rows` gives a tree: its ``sample`` (row indices), how many of the rows
    offered to it GDF ``filtered`` out, the gradients it uses (``grad``: as given with GDF,
    else clipped) and the rows ``carried`` on to the ensemble's next tree (None: none)."""

    sample: I64
    filtered: int
    grad: F64
    carried: B8 | None


def tree_rows(
    plan: TreePlan, keys: F64 | None, grad: F64, gdf: bool, carried: B8 | None = None
) -> TreeRows:
    """This tree's rows, the number GDF filtered out, its gradients and the rows it carries on.

    ``keys`` are the rows' ensemble keys (None with SEQ: every row); ``grad`` ``(n, 1)``;
    ``carried``: the rows the earlier trees of this ensemble filtered out and no tree used
    since (None: none). The tree is offered the rows whose key is in its share and the carried
    ones; GDF leaves out those with ``|g| > g*``, which are carried on (with shares, unless the
    tree is its ensemble's last); without GDF their gradients are clipped to ``g*`` and nothing
    is carried. Every decision is per row, so a client can apply it to its own rows alone.
    """
    n = grad.shape[0]
    offered, shared = np.ones(n, dtype=np.bool_), False
    if plan.lo is not None and plan.hi is not None and keys is not None:
        offered, shared = (keys >= plan.lo) & (keys < plan.hi), True
    g = plan.grad_bound
    if not gdf:
        return TreeRows(np.flatnonzero(offered), 0, np.clip(grad, -g, g), None)
    if carried is not None:
        if carried.shape != (n,):
            raise InputError(f"carried rows: {n} expected, got shape {carried.shape}")
        offered = offered | carried
    ok = np.abs(grad[:, 0]) <= g
    out = offered & ~ok
    on = out if shared and not plan.last and out.any() else None
    return TreeRows(np.flatnonzero(offered & ok), int(np.count_nonzero(out)), grad, on)


class KeyedRows:
    """The rows of a private run for a party that keys its own rows, one ensemble at a time
    (a horizontal client: the core's rule applied to its rows); ``draw(n)``: ``n`` fresh
    uniform keys. ``filtered``: the rows the gradient filter left out, per tree (this
    process's count, for the party itself).

    An ensemble's keys are drawn at its first tree and kept for its other trees, in this
    process's memory only. A party asked for a later tree of an ensemble whose first tree it
    did not compute (it restarted mid-ensemble) has lost them and draws none: it offers no rows
    to the rest of that ensemble, and keys its rows again at the next ensemble's first tree
    (see the module docstring for why).
    """

    def __init__(self, draw: Callable[[int], F64]) -> None:
        self._draw = draw
        self._keys: tuple[int, F64] | None = None
        self._carry = RowCarry()
        self.filtered: dict[int, int] = {}

    def rows(self, plan: TreePlan, grad: F64, gdf: bool) -> TreeRows:
        """Tree ``plan.index``'s rows (:func:`tree_rows`), the same if it is computed again;
        none for the rest of an ensemble this party did not key at its first tree."""
        keys = None
        if plan.lo is not None:  # shares: the ensemble's keys decide
            if self._keys is None or self._keys[0] != plan.ensemble:
                if plan.position > 0:  # restarted mid-ensemble: sit the ensemble out
                    self.filtered[plan.index] = 0
                    g = plan.grad_bound
                    return TreeRows(
                        np.empty(0, dtype=np.int64), 0, grad if gdf else np.clip(grad, -g, g), None
                    )
                self._keys = (plan.ensemble, np.asarray(self._draw(grad.shape[0])))
            keys = self._keys[1]
        picked = self._carry.rows(plan, keys, grad, gdf)
        self.filtered[plan.index] = picked.filtered
        return picked


class RowCarry:
    """The rows a private run carries from tree to tree within an ensemble (see
    :func:`tree_rows`), for a party that decides its own rows: the core's round loop, and a
    horizontal client for its rows.

    It keeps the rows carried into the tree last computed and into the one after it, so that
    the same tree computed again (a horizontal tree grown again after a dropout, on the same
    gradients) is offered the same rows. A tree at the start of an ensemble is offered nothing
    carried; so is a tree whose predecessor this party did not compute: the rows it would have
    carried are left out, which may cost rows but never lets a tree take a row twice (a
    horizontal client that restarted mid-ensemble offers no rows at all: :class:`KeyedRows`).
    """

    def __init__(self) -> None:
        self._into: dict[int, B8 | None] = {}

    def rows(self, plan: TreePlan, keys: F64 | None, grad: F64, gdf: bool) -> TreeRows:
        """Tree ``plan.index``'s rows (:func:`tree_rows`) with the rows carried into it."""
        carried = None if plan.position == 0 else self._into.get(plan.index)
        picked = tree_rows(plan, keys, grad, gdf, carried)
        self._into = {plan.index: carried, plan.index + 1: picked.carried}
        return picked


def clip_on_grid(grad: F64, grid: Grid, bound: float) -> F64:
    """On-grid gradients clipped to the largest grid value ``<= bound`` (rounding to the grid
    must not carry a gradient past ``g*``)."""
    top = math.floor(math.ldexp(bound, grid.bits))
    limit = math.ldexp(float(top), -grid.bits)
    return np.clip(grad, -limit, limit)


def split_scores(gl: F64, hl: F64, g: F64, h: F64, reg_lambda: float) -> F64:
    """DPBoost's split score ``GL^2/(HL+lambda) + GR^2/(HR+lambda)`` (empty children with
    ``lambda = 0`` count 0, never NaN); inputs broadcast, the last axis is the one output."""
    gr, hr = g - gl, h - hl
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(hl + reg_lambda > 0, gl * gl / (hl + reg_lambda), 0.0)
        right = np.where(hr + reg_lambda > 0, gr * gr / (hr + reg_lambda), 0.0)
    return np.asarray((left + right)[..., 0])


def constrained_scores(
    scores: F64,
    gl: F64,
    hl: F64,
    node_grad: F64,
    node_hess: F64,
    feature: I64,
    monotone: MonotoneNodes,
    reg_lambda: float,
    min_child_weight: float,
) -> F64:
    """``scores`` ``(k, C)`` with ``-inf`` where a candidate (left sums ``gl``/``hl``
    ``(k, C)`` of nodes with totals ``(k,)``, on ``feature`` ``(C,)``) breaks its feature's
    monotone direction: the exponential mechanism then draws among the valid ones only. The
    validity test reads the noiseless sums, as the split scores do."""
    lo, hi = monotone.lower[:, None], monotone.upper[:, None]
    wl = clamped_weight(gl, hl, lo, hi, reg_lambda, min_child_weight)
    wr = clamped_weight(
        node_grad[:, None] - gl, node_hess[:, None] - hl, lo, hi, reg_lambda, min_child_weight
    )
    ok = monotone_valid(wl, wr, monotone.direction[feature][None, :])
    return np.asarray(np.where(ok, scores, -np.inf))


class PrivateTree:
    """The mechanisms of one tree: split choice (the grower's split-choice hook) and the
    noisy leaves of the released tree."""

    def __init__(self, plan: TreePlan, reg_lambda: float, source: NoiseSource) -> None:
        self.plan = plan
        self.reg_lambda = reg_lambda
        self.source = source
        #: A mechanism ran (its output may have been seen).
        self.used = False

    def choose(self, scores: F64) -> I64:
        """Exponential mechanism per node over candidate ``scores`` ``(k, C)`` (``-inf``:
        not a candidate); the chosen column per node, -1 where there is none."""
        p = self.plan
        self.used = True
        return exponential_mechanism(scores * (p.level_epsilon / (2.0 * p.delta_g)), self.source)

    def layer_scores(
        self, hist: Histogram, node_grad: F64, node_hess: F64, candidates: B8
    ) -> tuple[F64, F64, F64, I64]:
        """Every candidate of the fixed grid ``candidates`` ``(F, B-1, 2)`` (both missing
        directions, empty bins too), in (feature, bin, direction) order: the scores, left
        gradient and hessian sums ``(k, C)`` and each candidate's flat position in the grid.

        Only the grid's candidates are scored and drawn for (not the masked ones), so a
        vertical guest that concatenates its own candidates with the hosts' (each in this
        order) draws the same noise for the same candidate as the core."""
        k, n_feat, n_slots, _ = hist.grad.shape
        where = np.flatnonzero(candidates.reshape(-1))
        gl = np.empty((k, n_feat, n_slots - 1, 2))
        hl = np.empty((k, n_feat, n_slots - 1, 2))
        np.cumsum(hist.grad[:, :, :-1, 0], axis=2, out=gl[:, :, :, 1])
        np.cumsum(hist.hess[:, :, :-1, 0], axis=2, out=hl[:, :, :, 1])
        np.add(gl[:, :, :, 1], hist.grad[:, :, -1:, 0], out=gl[:, :, :, 0])
        np.add(hl[:, :, :, 1], hist.hess[:, :, -1:, 0], out=hl[:, :, :, 0])
        gl_c = gl.reshape(k, -1)[:, where]
        hl_c = hl.reshape(k, -1)[:, where]
        scores = split_scores(
            gl_c[..., None],
            hl_c[..., None],
            node_grad[:, None, :1],
            node_hess[:, None, :1],
            self.reg_lambda,
        )
        return scores, gl_c, hl_c, where.astype(np.int64)

    def find_splits(
        self,
        hist: Histogram,
        node_grad: F64,
        node_hess: F64,
        candidates: B8,
        monotone: MonotoneNodes | None = None,
        min_child_weight: float = 0.0,
    ) -> LayerSplits:
        """The core's answer to the split-choice step (see :meth:`layer_scores`).

        Constraints (:mod:`~p2pboost.gbdt.constraints`) restrict what the mechanism draws
        among: per-node ``candidates`` ``(k, F, B-1, 2)`` (interaction groups) and, with
        ``monotone``, the candidates whose clamped children weights respect their feature's
        direction (:func:`constrained_scores`); the scores of the others are ``-inf``.
        """
        k, n_feat, n_slots, _ = hist.grad.shape
        grid = np.asarray(candidates.any(axis=0)) if candidates.ndim == 4 else candidates
        scores, gl, hl, where = self.layer_scores(hist, node_grad, node_hess, grid)
        if candidates.ndim == 4:
            scores = np.where(candidates.reshape(k, -1)[:, where], scores, -np.inf)
        if monotone is not None:
            feature = where // ((n_slots - 1) * 2)
            scores = constrained_scores(
                scores,
                gl,
                hl,
                node_grad[:, 0],
                node_hess[:, 0],
                feature,
                monotone,
                self.reg_lambda,
                min_child_weight,
            )
        best = self.choose(scores)
        pick = np.maximum(best, 0)
        flat = where[pick] if where.size else np.zeros(k, dtype=np.int64)
        f, t, d = np.unravel_index(flat, (n_feat, n_slots - 1, 2))
        rows = np.arange(k)
        has = where.size > 0
        return LayerSplits(
            gain=np.where(best >= 0, 0.0, -np.inf),  # no gain is released
            feature=f.astype(np.int64),
            threshold=t.astype(np.int64),
            default_left=d == 0,
            left_grad=(gl[rows, pick] if has else np.zeros(k))[:, None],
            left_hess=(hl[rows, pick] if has else np.zeros(k))[:, None],
            left_count=np.full(k, -1, dtype=np.int64),
        )

    def release(self, tree: Tree, node_grad: F64, node_hess: F64, learning_rate: float) -> Tree:
        """The tree as released: leaves ``eta * (clip(V) + Laplace)``; no value on internal
        nodes, no gains or covers (noiseless statistics of the rows)."""
        p = self.plan
        self.used = True
        g, h = node_grad[:, 0], node_hess[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(h + self.reg_lambda > 0, -g / (h + self.reg_lambda), 0.0)
        leaf = tree.is_leaf
        v = np.clip(v[leaf], -p.leaf_bound, p.leaf_bound)
        noisy = snapped_laplace(v, p.delta_v, p.leaf_epsilon, p.leaf_bound, self.source)
        value = np.zeros((tree.n_nodes, 1))
        value[leaf, 0] = learning_rate * noisy
        zeros = np.zeros(tree.n_nodes)
        return replace(tree, value=value, gain=zeros, cover=zeros)

    def spent(self) -> float:
        """This tree's epsilon with the snapping mechanism's small excess on the leaves."""
        p = self.plan
        leaf = snapping_epsilon(p.leaf_epsilon, p.delta_v, p.leaf_bound)
        return p.epsilon - p.leaf_epsilon + leaf


class PrivateRounds:
    """The privacy state of a training run: the noise stream, the rows' ensemble keys, the
    filtered counts (for the party that trains, never released) and the epsilon spent tree by
    tree.

    ``row_keys(ensemble, n)`` replaces the keys' own stream (a horizontal federation's rows
    are keyed by their clients; the core is given the same keys to compare).
    """

    def __init__(self, params: BoostParams, row_keys: RowKeys | None = None) -> None:
        self.params = params
        self.dp = _dp(params)
        self.source = NoiseSource(self.dp.noise_seed, "mechanisms")
        self._rows = NoiseSource(self.dp.noise_seed, "rows")
        self._row_keys = row_keys
        self._keys: F64 | None = None
        self._keys_of = -1
        self._carry = RowCarry()
        self.filtered: list[int] = []
        self.spent: list[tuple[int, float]] = []  # (ensemble, epsilon) per released tree
        self.extra = 0.0  # trees grown and abandoned after their choices were seen

    def keys(self, ensemble: int, n_rows: int) -> F64:
        """The rows' keys for ``ensemble`` (drawn once per ensemble)."""
        if self._keys is None or self._keys_of != ensemble or self._keys.size != n_rows:
            if self._row_keys is not None:
                keys = np.asarray(self._row_keys(ensemble, n_rows), dtype=np.float64)
                if keys.shape != (n_rows,):
                    raise InputError(f"row keys: {n_rows} expected, got shape {keys.shape}")
            else:
                keys = self._rows.uniform(n_rows)
            self._keys, self._keys_of = keys, ensemble
        return self._keys

    def rows(self, index: int, grad: F64) -> tuple[F64, F64, I64, TreePlan]:
        """Tree ``index``'s gradients (GDF or clipped), unit hessians, rows and plan."""
        plan = tree_plan(self.params, index)
        keys = None if plan.lo is None else self.keys(plan.ensemble, grad.shape[0])
        picked = self._carry.rows(plan, keys, grad, self.dp.gdf)
        self.filtered.append(picked.filtered)
        return picked.grad, np.ones_like(picked.grad), picked.sample, plan

    def tree(self, plan: TreePlan) -> PrivateTree:
        """The mechanisms of the tree planned by ``plan``."""
        return PrivateTree(plan, self.params.reg_lambda, self.source)

    def released(self, tree: PrivateTree) -> None:
        """Count a released tree's epsilon."""
        self.spent.append((tree.plan.ensemble, tree.spent()))

    def aborted(self, tree: PrivateTree) -> None:
        """Count a tree abandoned part-way (a horizontal client dropped and the tree is grown
        again): if its mechanisms ran, their choices were seen, so its whole budget is spent
        on top (sequential composition: the regrown tree uses the same rows)."""
        if tree.used:
            self.extra += tree.spent()

    @property
    def filtered_rows(self) -> int:
        """The row-trees the gradient filter left out (a carried row counts at every tree
        that filters it). A noiseless statistic of the training rows: the trainer's to see,
        never part of the released model (:func:`privacy_record` leaves it out)."""
        return int(sum(self.filtered))

    def record(self) -> dict[str, Any]:
        """The accountant's statement (see :func:`privacy_record`)."""
        return privacy_record(self.params, self.spent, self.source.seeded, extra=self.extra)


def privacy_record(
    params: BoostParams, spent: list[tuple[int, float]], seeded: bool, *, extra: float = 0.0
) -> dict[str, Any]:
    """What the released model spent: trees of one ensemble compose in parallel (disjoint
    rows: the largest counts), ensembles in sequence (they add up); SEQ's trees all add up.

    ``epsilon`` is the total over the trees released (early stopping releases every tree
    trained, so the count is of trees, not of rounds used). ``extra``: budget spent on trees
    grown and abandoned (added in full). The record travels with the model, so everything in
    it is a setting or a budget: no count of the training rows (the gradient filter's is not
    noised, so it would leak past the guarantee; :attr:`PrivateRounds.filtered_rows`).
    """
    dp = _dp(params)
    mech = DPMechanism(dp.mechanism)
    per_ensemble: dict[int, float] = {}
    for ensemble, eps in spent:
        if mech is DPMechanism.SEQ:
            per_ensemble[len(per_ensemble)] = eps
        else:
            per_ensemble[ensemble] = max(per_ensemble.get(ensemble, 0.0), eps)
    plan = tree_plan(params, 0)
    per_tree, eps_tree = _ensembles(params)
    return {
        "mechanism": mech.value,
        "epsilon": float(sum(per_ensemble.values()) + extra),
        "epsilon_requested": float(dp.epsilon),
        "neighbouring": "training sets that differ in one row",
        "trees": len(spent),
        "trees_per_ensemble": per_tree,
        "epsilon_per_tree": eps_tree,
        "epsilon_per_split_level": eps_tree / 2.0 / params.max_depth,
        "epsilon_leaves": eps_tree / 2.0,
        "grad_bound": plan.grad_bound,
        "delta_g": plan.delta_g,
        "gdf": dp.gdf,
        "glc": dp.glc,
        "noise": "seeded (tests only: not private)" if seeded else "os.urandom",
    }
