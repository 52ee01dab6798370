"""Monotone and interaction constraints, with XGBoost's semantics and spelling.

**Monotone constraints** (``monotone_constraints``): ``+1`` says the model's output must never
decrease when the feature grows (all else fixed), ``-1`` never increase, ``0`` free. As
XGBoost's ``hist`` (its ``TreeEvaluator``), every node carries bounds ``[lower, upper]`` on
its weight, ``(-inf, inf)`` at the root:

* a candidate's children weights are the Newton weights ``-G / (H + lambda)`` *clamped* to
  the node's bounds (:func:`clamped_weight`), and the candidate's gain is computed from those
  weights (:func:`gain_given_weight`: ``-(2 G w + (H + lambda) w^2)``, which is
  ``G^2 / (H + lambda)`` when nothing is clamped), minus the node's own score from its weight;
* a candidate on a constrained feature is invalid when its clamped weights go the wrong way
  (``+1`` needs ``w_left <= w_right``);
* when a node splits, its children inherit its bounds, and on a constrained feature the
  midpoint ``mid = (w_left + w_right) / 2`` becomes the left child's upper bound and the right
  child's lower bound (``+1``; the other way round for ``-1``) (:func:`child_bounds`). The
  children's own weights (their leaf values if they are not split) are clamped to the
  *parent's* bounds.

These "intermediate" bounds hold for every descendant, so no leaf reachable on the left of a
``+1`` split can exceed any leaf on its right: the tree is monotone in the feature, whatever
splits on other features come below. (LightGBM's "basic" method is the same; its "advanced"
method would recompute bounds from the leaves actually reachable, which XGBoost does not.)
As in XGBoost, the clamped gains and weights apply to every node of a model with at least one
non-zero direction; a model whose directions are all 0 is trained exactly as one without.

**Interaction constraints** (``interaction_constraints``): groups of features that may appear
together on a root-to-leaf path. XGBoost's rule (``FeatureInteractionConstraintHost``): the
root may split on any feature; a node whose path used the features ``U`` may split on ``U``
itself and on every group that contains all of ``U`` (:func:`allowed_features`). So a
feature in no group may be used only on a path that has used nothing else, and it then ends
the path's use of grouped features.

The functions on sums are pure and know nothing of where sums come from, so a caller that
holds only candidates' left/right sums (the vertical guest, on sums it decrypted) applies the
same rules as the core's grower; :class:`TreeConstraints` is the per-tree state the grower
keeps (node bounds, weights and path features).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError

__all__ = [
    "FeatureConstraints",
    "InteractionSpec",
    "MonotoneNodes",
    "MonotoneSpec",
    "TreeConstraints",
    "allowed_features",
    "child_bounds",
    "clamped_weight",
    "gain_given_weight",
    "has_constraints",
    "monotone_split_gains",
    "monotone_valid",
    "parse_interactions",
    "parse_monotone",
    "resolve_constraints",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: ``monotone_constraints`` as :class:`~p2pboost.gbdt.params.BoostParams` keeps it: one
#: direction per feature by position, or directions by feature name (absent names: 0).
MonotoneSpec = tuple[int, ...] | dict[str, int]
#: ``interaction_constraints``: groups of feature names or positions.
InteractionSpec = tuple[tuple[str | int, ...], ...]


# -- parameters --------------------------------------------------------------------------------


def _direction(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(f"monotone_constraints {where} must be -1, 0 or 1, not {value!r}")
    if value not in (-1, 0, 1):
        raise InputError(f"monotone_constraints {where} must be -1, 0 or 1, not {value!r}")
    return int(value)


def parse_monotone(value: Any) -> MonotoneSpec | None:
    """``monotone_constraints`` in its kept form, from a sequence of directions (a tuple, a
    list, an array), XGBoost's string ``"(1,0,-1)"``, or a mapping of feature names to
    directions; None or empty: no constraint. Raises :class:`InputError` naming the cause."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().strip("()[]").strip()
        if not text:
            return None
        try:
            items: list[Any] = [int(part) for part in text.split(",")]
        except ValueError:
            raise InputError(
                f"monotone_constraints {value!r} is not a list of -1/0/1 such as '(1,0,-1)'"
            ) from None
        return tuple(_direction(f"[{i}]", v) for i, v in enumerate(items)) or None
    if isinstance(value, Mapping):
        out: dict[str, int] = {}
        for name, v in value.items():
            if not isinstance(name, str):
                raise InputError(
                    "monotone_constraints as a mapping takes feature names; give directions "
                    f"by position as a tuple instead (got the key {name!r})"
                )
            out[name] = _direction(f"[{name!r}]", v)
        return out or None
    if isinstance(value, Sequence | np.ndarray):
        arr = list(np.asarray(value, dtype=object).reshape(-1)) if np.ndim(value) else None
        if arr is None:
            raise InputError(f"monotone_constraints must be a sequence, not {value!r}")
        return tuple(_direction(f"[{i}]", v) for i, v in enumerate(arr)) or None
    raise InputError(
        "monotone_constraints must be a tuple of -1/0/1 per feature, a mapping of feature "
        f"names to -1/0/1, or a string such as '(1,0,-1)'; not {value!r}"
    )


def parse_interactions(value: Any) -> InteractionSpec | None:
    """``interaction_constraints`` in its kept form, from groups (sequences) of feature names
    or positions, or XGBoost's JSON string ``'[[0, 1], [2, 3]]'``; None or empty: none."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise InputError(
                f"interaction_constraints {value!r} is not a JSON list of lists "
                "such as '[[0, 1], [2, 3]]'"
            ) from None
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise InputError(
            f"interaction_constraints must be a list of groups of features, not {value!r}"
        )
    groups: list[tuple[str | int, ...]] = []
    for i, group in enumerate(value):
        if isinstance(group, str) or not isinstance(group, Sequence | np.ndarray | set):
            raise InputError(
                f"interaction_constraints[{i}] must be a list of feature names or positions, "
                f"not {group!r}"
            )
        members: list[str | int] = []
        for member in group:
            if isinstance(member, str):
                members.append(member)
            elif isinstance(member, int | np.integer) and not isinstance(member, bool):
                if member < 0:
                    raise InputError(f"interaction_constraints[{i}] has a negative position")
                members.append(int(member))
            else:
                raise InputError(
                    f"interaction_constraints[{i}] holds {member!r}: a feature is a name or "
                    "a position"
                )
        if not members:
            raise InputError(f"interaction_constraints[{i}] is empty: a group needs a feature")
        groups.append(tuple(members))
    return tuple(groups) or None


def has_constraints(monotone: MonotoneSpec | None, interactions: InteractionSpec | None) -> bool:
    """Whether the settings constrain anything (a non-zero direction, or a group)."""
    values = monotone.values() if isinstance(monotone, dict) else monotone or ()
    return any(values) or bool(interactions)


@dataclass(frozen=True, slots=True, eq=False)
class FeatureConstraints:
    """The constraints of a model resolved against its features (global feature order).

    ``monotone`` ``(F,)`` holds -1/0/+1 (None: no non-zero direction, so weights and gains are
    the unconstrained ones); ``groups`` ``(S, F)`` the interaction groups as masks (None: any
    feature may follow any other).
    """

    monotone: I64 | None
    groups: B8 | None

    @property
    def n_features(self) -> int:
        arr = self.monotone if self.monotone is not None else self.groups
        assert arr is not None
        return int(arr.shape[-1])


def resolve_constraints(
    monotone: MonotoneSpec | None,
    interactions: InteractionSpec | None,
    n_features: int,
    feature_names: Sequence[str] | None = None,
    categorical: Sequence[str] = (),
) -> FeatureConstraints | None:
    """The constraints as arrays over ``n_features`` features, or None when there is none.

    Names are looked up in ``feature_names``; a directional constraint on a ``categorical``
    feature (ordinal codes have no order that means anything) is refused, as is a tuple of
    the wrong length, an unknown name or a position out of range (:class:`InputError`).
    """
    names = list(feature_names) if feature_names is not None else None
    index = {name: i for i, name in enumerate(names)} if names is not None else {}

    def position(what: str, key: str | int) -> int:
        if isinstance(key, int):
            if key >= n_features:
                raise InputError(
                    f"{what} names feature {key}, but the data have {n_features} features"
                )
            return key
        if names is None:
            raise InputError(
                f"{what} names the feature {key!r} but the features have no names (train on "
                "a DataFrame or give feature_names); give positions instead"
            )
        if key not in index:
            raise InputError(f"{what} names an unknown feature {key!r}")
        return index[key]

    mono: I64 | None = None
    if monotone is not None:
        if isinstance(monotone, dict):
            mono = np.zeros(n_features, dtype=np.int64)
            unknown = sorted(k for k in monotone if names is not None and k not in index)
            if unknown:
                raise InputError(
                    f"monotone_constraints names unknown feature(s): {', '.join(unknown)}"
                )
            for key, direction in monotone.items():
                mono[position("monotone_constraints", key)] = direction
        else:
            if len(monotone) != n_features:
                raise InputError(
                    f"monotone_constraints has {len(monotone)} directions but the data have "
                    f"{n_features} features (one -1/0/1 per feature, or a mapping by name)"
                )
            mono = np.asarray(monotone, dtype=np.int64)
        if names is not None:
            bad = [names[i] for i in np.flatnonzero(mono) if names[i] in set(categorical)]
            if bad:
                raise InputError(
                    f"monotone_constraints on categorical feature(s) {', '.join(bad)}: their "
                    "codes have no order, so a direction means nothing"
                )
        if not mono.any():
            mono = None
    groups: B8 | None = None
    if interactions is not None:
        groups = np.zeros((len(interactions), n_features), dtype=np.bool_)
        for s, group in enumerate(interactions):
            for member in group:
                groups[s, position(f"interaction_constraints[{s}]", member)] = True
    if mono is None and groups is None:
        return None
    return FeatureConstraints(mono, groups)


# -- pure functions on sums ----------------------------------------------------------------------


def clamped_weight(
    G: F64, H: F64, lower: F64, upper: F64, reg_lambda: float, min_child_weight: float
) -> F64:
    """Newton weight ``-G / (H + lambda)`` (0 where ``H < min_child_weight``, as
    :func:`~p2pboost.gbdt.split.leaf_weight`) clamped to ``[lower, upper]``; all broadcast."""
    G = np.asarray(G, dtype=np.float64)
    H = np.asarray(H, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -G / (H + reg_lambda)
    w = np.where((H < min_child_weight) | (H + reg_lambda <= 0), 0.0, w)
    return np.asarray(np.minimum(np.maximum(w, lower), upper))


def gain_given_weight(G: F64, H: F64, w: F64, reg_lambda: float) -> F64:
    """Score of a node of sums ``G``, ``H`` with weight ``w``: ``-(2 G w + (H + lambda) w^2)``
    (0 where ``H <= 0``), XGBoost's ``CalcGainGivenWeight``; all broadcast."""
    score = -(2.0 * G * w + (H + reg_lambda) * w * w)
    return np.asarray(np.where(H <= 0, 0.0, score))


def monotone_valid(w_left: F64, w_right: F64, direction: I64) -> B8:
    """Whether children weights respect ``direction`` (+1: ``w_left <= w_right``, -1:
    ``w_left >= w_right``, 0: always); all broadcast."""
    d = np.asarray(direction)
    return np.asarray(((d > 0) & (w_left <= w_right)) | ((d < 0) & (w_left >= w_right)) | (d == 0))


def monotone_split_gains(
    GL: F64,
    HL: F64,
    GR: F64,
    HR: F64,
    node_weight: F64,
    lower: F64,
    upper: F64,
    direction: I64,
    reg_lambda: float,
    min_child_weight: float,
) -> F64:
    """Loss change of candidate splits under monotone constraints; ``-inf`` where a
    candidate's clamped weights go against its feature's ``direction``.

    ``GL``/``HL``/``GR``/``HR`` ``(..., K)`` are the children's sums (the last axis is outputs,
    summed over); ``node_weight``, ``lower``, ``upper`` (the node's weight and bounds) and
    ``direction`` (the candidate feature's -1/0/+1) broadcast against ``(...)``. The node's
    own score is :func:`gain_given_weight` of its weight, so an unclamped model gets the
    plain gains. Validity against ``min_child_weight``/``min_samples_leaf`` is the caller's.
    """
    lo, hi = np.asarray(lower)[..., None], np.asarray(upper)[..., None]
    G = np.asarray(GL) + np.asarray(GR)
    H = np.asarray(HL) + np.asarray(HR)
    wl = clamped_weight(GL, HL, lo, hi, reg_lambda, min_child_weight)
    wr = clamped_weight(GR, HR, lo, hi, reg_lambda, min_child_weight)
    with np.errstate(invalid="ignore", over="ignore"):
        children = gain_given_weight(GL, HL, wl, reg_lambda) + gain_given_weight(
            GR, HR, wr, reg_lambda
        )
        parent = gain_given_weight(G, H, np.asarray(node_weight)[..., None], reg_lambda)
    gains = np.asarray((children - parent).sum(axis=-1))
    ok = monotone_valid(wl, wr, np.asarray(direction)[..., None]).all(axis=-1)
    return np.asarray(np.where(ok, gains, -np.inf))


def child_bounds(
    lower: F64, upper: F64, direction: I64, w_left: F64, w_right: F64
) -> tuple[F64, F64, F64, F64]:
    """Bounds ``(left_lower, left_upper, right_lower, right_upper)`` of the children of split
    nodes (XGBoost's ``AddSplit``): the node's bounds, with ``mid = (w_left + w_right) / 2``
    as the left child's upper and the right child's lower bound for ``+1`` (the other way for
    ``-1``). ``w_left``/``w_right`` are the children's clamped weights; all broadcast."""
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    d = np.asarray(direction)
    mid = (np.asarray(w_left) + np.asarray(w_right)) / 2.0
    left_lo = np.where(d < 0, mid, lower)
    left_hi = np.where(d > 0, mid, upper)
    right_lo = np.where(d > 0, mid, lower)
    right_hi = np.where(d < 0, mid, upper)
    return left_lo, left_hi, right_lo, right_hi


def allowed_features(used: B8, groups: B8) -> B8:
    """Features nodes may split on, from the features their paths used ``(k, F)`` and the
    interaction groups ``(S, F)``: the used ones, and every group containing all of them (the
    root, with nothing used, may split on anything)."""
    used = np.asarray(used, dtype=np.bool_)
    # group s is open to node i when used[i] is a subset of groups[s]
    outside = used.astype(np.int64) @ (~groups).T.astype(np.int64)  # (k, S)
    open_ = outside == 0
    allowed = (open_.astype(np.int64) @ groups.astype(np.int64)) > 0
    root = np.asarray(~used.any(axis=1))
    return np.asarray(allowed | used | root[:, None])


# -- per-tree state ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class MonotoneNodes:
    """What split finding needs of ``k`` nodes under monotone constraints: their weights and
    bounds ``(k,)``, and the features' directions ``(F,)``."""

    weight: F64
    lower: F64
    upper: F64
    direction: I64


class TreeConstraints:
    """The constraint state of one tree being grown, by node id: bounds and weight of every
    node (monotone) and the features its path used (interaction)."""

    def __init__(self, constraints: FeatureConstraints) -> None:
        self.constraints = constraints
        n_feat = constraints.n_features
        self.lower = np.empty(0)
        self.upper = np.empty(0)
        self.weight = np.empty(0)
        self.used = np.zeros((0, n_feat), dtype=np.bool_)

    def add_nodes(
        self,
        g: F64,
        h: F64,
        parents: I64 | None,
        feature: I64 | None,
        reg_lambda: float,
        min_child_weight: float,
    ) -> F64:
        """Record new nodes (ids continue from the last) of totals ``g``/``h`` ``(m, K)`` and
        return their unscaled weights ``(m, K)``: the root (``parents`` None), or the children
        (left, right, left, ...) of the split nodes ``parents`` ``(m / 2,)`` on the global
        ``feature`` of each split (-1: unknown, so neither a direction nor a path feature).
        Children's weights are clamped to their parent's bounds, their own bounds follow
        :func:`child_bounds` (XGBoost's ``CalcWeight`` and ``AddSplit``)."""
        m, n_feat = g.shape[0], self.used.shape[1]
        if parents is None:
            lower, upper = np.full(m, -np.inf), np.full(m, np.inf)
            w = clamped_weight(g, h, lower[:, None], upper[:, None], reg_lambda, min_child_weight)
            self._append(w[:, 0], lower, upper, np.zeros((m, n_feat), dtype=np.bool_))
            return w
        assert feature is not None
        lo, hi = np.repeat(self.lower[parents], 2), np.repeat(self.upper[parents], 2)
        w = clamped_weight(g, h, lo[:, None], hi[:, None], reg_lambda, min_child_weight)
        mono = self.constraints.monotone
        known = feature >= 0
        direction = np.zeros(parents.size, dtype=np.int64)
        if mono is not None:
            direction[known] = mono[feature[known]]
        left_lo, left_hi, right_lo, right_hi = child_bounds(
            self.lower[parents], self.upper[parents], direction, w[0::2, 0], w[1::2, 0]
        )
        used = self.used[parents].copy()
        used[np.flatnonzero(known), feature[known]] = True
        self._append(
            w[:, 0],
            _pairs(left_lo, right_lo),
            _pairs(left_hi, right_hi),
            np.repeat(used, 2, axis=0),
        )
        return w

    def _append(self, weight: F64, lower: F64, upper: F64, used: B8) -> None:
        self.weight = np.concatenate([self.weight, weight])
        self.lower = np.concatenate([self.lower, lower])
        self.upper = np.concatenate([self.upper, upper])
        self.used = np.concatenate([self.used, used])

    def nodes(self, nodes: I64) -> MonotoneNodes | None:
        """The monotone view of ``nodes`` for split finding (None: no direction)."""
        if self.constraints.monotone is None:
            return None
        return MonotoneNodes(
            self.weight[nodes], self.lower[nodes], self.upper[nodes], self.constraints.monotone
        )

    def features(self, nodes: I64) -> B8 | None:
        """Features each node may split on ``(k, F)`` (None: no interaction constraint)."""
        if self.constraints.groups is None:
            return None
        return allowed_features(self.used[nodes], self.constraints.groups)


def _pairs(a: F64, b: F64) -> F64:
    """``[a0, b0, a1, b1, ...]``: children in node-id order."""
    return np.stack([a, b], axis=1).reshape(-1)
