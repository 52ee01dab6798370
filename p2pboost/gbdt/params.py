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
from p2pboost.gbdt.objectives import canonical_objective

__all__ = ["MAX_BIN_LIMIT", "BoostParams", "MultiStrategy"]

#: Largest ``max_bin``: bins (plus the missing bin) then fit in ``uint16``; up to 255 in ``uint8``.
MAX_BIN_LIMIT = 256


class MultiStrategy(StrEnum):
    """How a model with several outputs (multi-class) grows its trees."""

    #: One scalar tree per output per round (XGBoost's default, ``one_output_per_tree``).
    ONE_OUTPUT_PER_TREE = "one_output_per_tree"
    #: One tree per round with a vector of weights in each leaf (SecureBoost+ eq. 17-19).
    MULTI_OUTPUT_TREE = "multi_output_tree"


@dataclass(frozen=True, slots=True)
class BoostParams:
    """Every knob of training. Build with keywords, then call :meth:`validate`.

    ``gamma`` is XGBoost's ``min_split_loss``: a node is split only if its best gain (see
    :func:`p2pboost.gbdt.split.split_gains`) exceeds it. ``min_samples_leaf`` counts rows;
    ``min_child_weight`` bounds a child's hessian sum. ``top_rate``/``other_rate`` are GOSS's
    ``a`` and ``b`` (used when ``goss`` is true). ``base_score`` is on the *prediction* scale
    (a probability for logistic, a mean for regression); ``None`` estimates it from the labels.
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

    def with_updates(self, **changes: Any) -> BoostParams:
        """A validated copy with ``changes`` applied; unknown names raise :class:`InputError`."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InputError(f"unknown parameter(s): {', '.join(unknown)}")
        if "multi_strategy" in changes:
            changes["multi_strategy"] = _strategy(changes["multi_strategy"])
        return replace(self, **changes).validate()

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BoostParams:
        """Build and validate from plain values (as produced by :meth:`to_dict`)."""
        return cls().with_updates(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        out = asdict(self)
        out["multi_strategy"] = MultiStrategy(self.multi_strategy).value
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
