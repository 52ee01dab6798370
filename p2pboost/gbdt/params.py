"""Training parameters: one frozen value, validated in one place.

Defaults follow XGBoost's (``reg_lambda=1``, ``gamma=0``, ``min_child_weight=1``,
``learning_rate=0.3``, ``max_depth=6``, ``max_bin`` 32 here), so a model trained with defaults is
comparable to ``xgboost`` with ``tree_method="hist"`` and the same ``max_bin``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

from p2pboost.exceptions import InputError
from p2pboost.gbdt.constraints import (
    InteractionSpec,
    MonotoneSpec,
    parse_interactions,
    parse_monotone,
)
from p2pboost.gbdt.objectives import canonical_objective

__all__ = [
    "DP_OBJECTIVES",
    "MAX_BIN_LIMIT",
    "BoostParams",
    "DPMechanism",
    "DPParams",
    "MultiStrategy",
]

#: Largest ``max_bin``: bins (plus the missing bin) then fit in ``uint16``; up to 255 in ``uint8``.
MAX_BIN_LIMIT = 256


class MultiStrategy(StrEnum):
    """How a model with several outputs (multi-class) grows its trees."""

    #: One scalar tree per output per round (XGBoost's default, ``one_output_per_tree``).
    ONE_OUTPUT_PER_TREE = "one_output_per_tree"
    #: One tree per round with a vector of weights in each leaf (SecureBoost+ eq. 17-19).
    MULTI_OUTPUT_TREE = "multi_output_tree"


class DPMechanism(StrEnum):
    """How a differentially private model spends its budget across trees (DPBoost, Li et al.
    AAAI 2020; :mod:`p2pboost.gbdt.privacy`)."""

    #: Ensembles of ensembles: trees of one ensemble on disjoint rows (parallel composition),
    #: ensembles in sequence; rows per tree shrink geometrically with the learning rate.
    DPBOOST = "dpboost"
    #: Baseline: every tree on all rows, ``epsilon / n_estimators`` each (sequential).
    SEQ = "seq"
    #: Baseline: one tree per disjoint share of the rows, ``epsilon`` each (parallel).
    PARA = "para"


#: The objectives with a bounded gradient DPBoost's sensitivities are proved for.
DP_OBJECTIVES = ("binary:logistic", "reg:squarederror")


@dataclass(frozen=True, slots=True)
class DPParams:
    """Differential privacy of the released model (see :mod:`p2pboost.gbdt.privacy`).

    ``epsilon`` is the budget of the whole model; ``mechanism`` how it is spent across trees
    (:class:`DPMechanism`); ``trees_per_ensemble`` DPBoost's ``T_e``. ``gdf``: gradient-based
    data filtering (rows whose gradient exceeds ``grad_bound`` sit a tree out, and with DPBoost
    and PARA are offered to the ensemble's next trees; off: their gradients are clipped
    instead). ``glc``: geometric leaf clipping. ``grad_bound`` is
    DPBoost's ``g*_l``; None takes the loss's largest gradient at margin 0 over the labels
    (0.5 for ``binary:logistic``, ``label_bound`` for ``reg:squarederror``, whose labels must
    lie in ``[-label_bound, label_bound]``). ``noise_seed`` makes the noise repeatable: for
    tests and comparisons only (the model file then says the noise was seeded).
    ``monotone_heuristic``: allow monotone constraints with differential privacy. Off by
    default because the epsilon is then not proved: the mechanisms draw among the candidates
    whose clamped weights respect the directions, and that validity test reads the noiseless
    sums in a way DPBoost's sensitivity analysis does not bound (one row can remove a
    candidate from the range); the released leaves carry Laplace noise and are not clamped,
    so the released model's monotonicity is not guaranteed either. The model file records the
    setting, so a reviewer sees that its epsilon is heuristic.
    """

    epsilon: float = 1.0
    mechanism: DPMechanism | str = DPMechanism.DPBOOST
    trees_per_ensemble: int = 50
    gdf: bool = True
    glc: bool = True
    grad_bound: float | None = None
    label_bound: float = 1.0
    noise_seed: int | None = None
    monotone_heuristic: bool = False

    def validate(self) -> DPParams:
        """Return ``self`` if every value is in range, else raise :class:`InputError`."""
        _check_real("dp.epsilon", self.epsilon, 0.0, None, low_open=True)
        _check_int("dp.trees_per_ensemble", self.trees_per_ensemble, 1)
        _check_real("dp.label_bound", self.label_bound, 0.0, None, low_open=True)
        if self.grad_bound is not None:
            _check_real("dp.grad_bound", self.grad_bound, 0.0, None, low_open=True)
        if self.noise_seed is not None:
            _check_int("dp.noise_seed", self.noise_seed, 0)
        for name in ("gdf", "glc", "monotone_heuristic"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"dp.{name} must be a boolean")
        try:
            DPMechanism(self.mechanism)
        except ValueError:
            choices = ", ".join(m.value for m in DPMechanism)
            raise InputError(f"unknown dp.mechanism {self.mechanism!r}; choose {choices}") from None
        return self

    @classmethod
    def from_value(cls, value: Any) -> DPParams | None:
        """From a :class:`DPParams`, a map of its fields (as :meth:`to_dict` writes), or None."""
        if value is None or isinstance(value, DPParams):
            return None if value is None else value.validate()
        if not isinstance(value, dict):
            raise InputError(
                f"dp must be a map of settings (e.g. {{'epsilon': 1.0}}), not {value!r}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InputError(f"unknown dp setting(s): {', '.join(unknown)}")
        return cls(**value).validate()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        out = asdict(self)
        out["mechanism"] = DPMechanism(self.mechanism).value
        return out


@dataclass(frozen=True, slots=True)
class BoostParams:
    """Every knob of training. Build with keywords, then call :meth:`validate`.

    ``gamma`` is XGBoost's ``min_split_loss``: a node is split only if its best gain (see
    :func:`p2pboost.gbdt.split.split_gains`) exceeds it. ``min_samples_leaf`` counts rows;
    ``min_child_weight`` bounds a child's hessian sum. ``colsample_bytree``,
    ``colsample_bylevel`` and ``colsample_bynode`` are XGBoost's: a share of the features per
    tree, of the tree's per depth, of the depth's per node. ``top_rate``/``other_rate`` are GOSS's
    ``a`` and ``b`` (used when ``goss`` is true). ``base_score`` is on the *prediction* scale
    (a probability for logistic, a mean for regression); ``None`` estimates it from the labels.
    ``dp`` (a :class:`DPParams`) trains a differentially private model instead (DPBoost).
    ``monotone_constraints`` (-1/0/+1 per feature: a tuple by position, a mapping by feature
    name, or XGBoost's string ``"(1,0,-1)"``) and ``interaction_constraints`` (groups of
    feature names or positions that may share a path) are XGBoost's, see
    :mod:`p2pboost.gbdt.constraints`; they are kept normalised (a tuple or a dict; a tuple of
    tuples) and resolved against the features when training starts.
    """

    objective: str = "binary:logistic"
    num_class: int = 1
    n_estimators: int = 100
    learning_rate: float = 0.3
    max_depth: int = 6
    max_bin: int = 32
    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    min_samples_leaf: int = 1
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    colsample_bylevel: float = 1.0
    colsample_bynode: float = 1.0
    goss: bool = False
    top_rate: float = 0.2
    other_rate: float = 0.1
    multi_strategy: MultiStrategy | str = MultiStrategy.ONE_OUTPUT_PER_TREE
    base_score: float | None = None
    sparse_aware: bool | str = "auto"
    huber_delta: float = 1.0
    fair_c: float = 1.0
    tweedie_variance_power: float = 1.5
    seed: int = 0
    dp: DPParams | None = None
    monotone_constraints: MonotoneSpec | None = None
    interaction_constraints: InteractionSpec | None = None

    def __post_init__(self) -> None:
        # Normalised at construction, so equal settings compare (and digest) equal.
        object.__setattr__(self, "monotone_constraints", parse_monotone(self.monotone_constraints))
        object.__setattr__(
            self, "interaction_constraints", parse_interactions(self.interaction_constraints)
        )

    def validate(self) -> BoostParams:
        """Return ``self`` if every value is in range, else raise :class:`InputError`."""
        _check_int("num_class", self.num_class, 1)
        _check_int("n_estimators", self.n_estimators, 1)
        _check_int("max_depth", self.max_depth, 1, 30)
        _check_int("max_bin", self.max_bin, 2, MAX_BIN_LIMIT)
        _check_int("min_samples_leaf", self.min_samples_leaf, 1)
        _check_int("seed", self.seed, 0)
        _check_real("learning_rate", self.learning_rate, 0.0, None, low_open=True)
        _check_real("reg_lambda", self.reg_lambda, 0.0, None)
        _check_real("gamma", self.gamma, 0.0, None)
        _check_real("min_child_weight", self.min_child_weight, 0.0, None)
        _check_real("subsample", self.subsample, 0.0, 1.0, low_open=True)
        _check_real("colsample_bytree", self.colsample_bytree, 0.0, 1.0, low_open=True)
        _check_real("colsample_bylevel", self.colsample_bylevel, 0.0, 1.0, low_open=True)
        _check_real("colsample_bynode", self.colsample_bynode, 0.0, 1.0, low_open=True)
        _check_real("top_rate", self.top_rate, 0.0, 1.0, low_open=True)
        _check_real("other_rate", self.other_rate, 0.0, 1.0, low_open=True)
        _check_real("huber_delta", self.huber_delta, 0.0, None, low_open=True)
        _check_real("fair_c", self.fair_c, 0.0, None, low_open=True)
        _check_real("tweedie_variance_power", self.tweedie_variance_power, 1.0, 2.0, True, True)
        if not isinstance(self.goss, bool):
            raise InputError("goss must be a boolean")
        if not (isinstance(self.sparse_aware, bool) or self.sparse_aware == "auto"):
            raise InputError(
                f"sparse_aware must be True, False or 'auto', not {self.sparse_aware!r}"
            )
        if self.goss and self.top_rate + self.other_rate > 1.0:
            raise InputError("GOSS needs top_rate + other_rate <= 1")
        if self.goss and self.subsample < 1.0:
            raise InputError("use either GOSS or subsample < 1, not both")
        if self.reg_lambda == 0.0 and self.min_child_weight == 0.0:
            raise InputError("reg_lambda and min_child_weight cannot both be 0 (0/0 leaf weights)")
        if self.base_score is not None:
            _check_real("base_score", self.base_score, None, None)
        if not isinstance(self.objective, str):
            raise InputError("objective must be a string name")
        if self.dp is not None:
            self._validate_dp()
        multi_output = self.multi_strategy == MultiStrategy.MULTI_OUTPUT_TREE
        if self.monotone_constraints is not None and multi_output:
            raise InputError(
                "monotone_constraints need one weight per leaf: a vector leaf "
                "(multi_strategy='multi_output_tree') has no single direction; use "
                "multi_strategy='one_output_per_tree'"
            )
        multi = canonical_objective(self.objective) == "multi:softmax"
        if multi and self.num_class < 2:
            raise InputError("multi:softmax needs num_class >= 2")
        if not multi and self.num_class != 1:
            raise InputError(f"num_class must be 1 for {self.objective}, got {self.num_class}")
        try:
            MultiStrategy(self.multi_strategy)
        except ValueError:
            choices = ", ".join(s.value for s in MultiStrategy)
            raise InputError(
                f"unknown multi_strategy {self.multi_strategy!r}; choose {choices}"
            ) from None
        return self

    def _validate_dp(self) -> None:
        """What differential privacy rules out: settings whose effect depends on the data in
        a way DPBoost's accounting does not cover (each refusal says why)."""
        if not isinstance(self.dp, DPParams):
            raise InputError("dp must be a DPParams (or a map of its settings)")
        self.dp.validate()
        if canonical_objective(self.objective) not in DP_OBJECTIVES:
            raise InputError(
                f"differential privacy supports {' and '.join(DP_OBJECTIVES)} (losses with a "
                f"bounded gradient), not {self.objective!r}"
            )
        if self.goss or self.subsample < 1.0:
            raise InputError(
                "differential privacy assigns rows to trees itself: use neither goss nor "
                "subsample < 1 with dp"
            )
        if self.colsample_bylevel < 1.0 or self.colsample_bynode < 1.0:
            raise InputError(
                "differential privacy samples columns per tree only (colsample_bytree): "
                "leave colsample_bylevel and colsample_bynode at 1 with dp"
            )
        if self.gamma != 0.0 or self.min_samples_leaf != 1:
            raise InputError(
                "differential privacy grows full trees (stopping on gains or row counts would "
                "spend budget DPBoost does not account for): leave gamma=0 and "
                "min_samples_leaf=1 with dp"
            )
        mono = self.monotone_constraints
        directions = mono.values() if isinstance(mono, dict) else (mono or ())
        if any(directions) and not self.dp.monotone_heuristic:
            raise InputError(
                "monotone_constraints with dp leave the epsilon unproved (which candidates "
                "respect the directions depends on the data beyond DPBoost's sensitivity "
                "bounds, and the noisy leaves are not clamped): drop one of the two, or set "
                "dp.monotone_heuristic = true to train anyway with a heuristic epsilon "
                "(interaction_constraints are fine with dp)"
            )

    def with_updates(self, **changes: Any) -> BoostParams:
        """A validated copy with ``changes`` applied; unknown names raise :class:`InputError`."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InputError(f"unknown parameter(s): {', '.join(unknown)}")
        if "multi_strategy" in changes:
            changes["multi_strategy"] = _strategy(changes["multi_strategy"])
        if "dp" in changes:
            changes["dp"] = DPParams.from_value(changes["dp"])
        return replace(self, **changes).validate()

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BoostParams:
        """Build and validate from plain values (as produced by :meth:`to_dict`)."""
        return cls().with_updates(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        out = asdict(self)
        out["multi_strategy"] = MultiStrategy(self.multi_strategy).value
        out["dp"] = None if self.dp is None else self.dp.to_dict()
        mono = self.monotone_constraints
        out["monotone_constraints"] = (
            None if mono is None else dict(mono) if isinstance(mono, dict) else list(mono)
        )
        groups = self.interaction_constraints
        out["interaction_constraints"] = None if groups is None else [list(g) for g in groups]
        return out


def _strategy(value: Any) -> MultiStrategy:
    try:
        return MultiStrategy(value)
    except ValueError:
        choices = ", ".join(s.value for s in MultiStrategy)
        raise InputError(f"unknown multi_strategy {value!r}; choose {choices}") from None


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise InputError(f"{name} must be {bound}, got {value}")


def _check_real(
    name: str,
    value: Any,
    low: float | None,
    high: float | None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InputError(f"{name} must be finite, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise InputError(f"{name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and (v > high or (high_open and v == high)):
        raise InputError(f"{name} must be {'<' if high_open else '<='} {high}, got {value}")
