"""scikit-learn-style estimators over :func:`~p2pboost.gbdt.booster.train`.

Conventions (scikit-learn's): ``__init__`` only stores its arguments; ``fit`` validates them
and returns ``self``; fitted attributes end in ``_`` (``booster_``, ``n_features_in_``,
``feature_importances_``, and ``classes_`` for the classifier). ``get_params``/``set_params``
make the estimators work with ``sklearn.base.clone`` and grid search, without depending on
scikit-learn.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, NotFittedError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.callbacks import Callback, EarlyStopping
from p2pboost.gbdt.objectives import canonical_objective
from p2pboost.gbdt.params import BoostParams

__all__ = ["GBDTClassifier", "GBDTRegressor"]

F64 = npt.NDArray[np.float64]


class _GBDTBase:
    """Shared parameter handling; subclasses define the task."""

    def __init__(
        self,
        *,
        n_estimators: int = 100,
        learning_rate: float = 0.3,
        max_depth: int = 6,
        max_bin: int = 32,
        reg_lambda: float = 1.0,
        gamma: float = 0.0,
        min_child_weight: float = 1.0,
        min_samples_leaf: int = 1,
        subsample: float = 1.0,
        colsample_bytree: float = 1.0,
        goss: bool = False,
        top_rate: float = 0.2,
        other_rate: float = 0.1,
        base_score: float | None = None,
        sparse_aware: bool | str = "auto",
        early_stopping_rounds: int | None = None,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.max_bin = max_bin
        self.reg_lambda = reg_lambda
        self.gamma = gamma
        self.min_child_weight = min_child_weight
        self.min_samples_leaf = min_samples_leaf
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.goss = goss
        self.top_rate = top_rate
        self.other_rate = other_rate
        self.base_score = base_score
        self.sparse_aware = sparse_aware
        self.early_stopping_rounds = early_stopping_rounds
        self.random_state = random_state

    # -- scikit-learn protocol -------------------------------------------------------------------

    @classmethod
    def _param_names(cls) -> list[str]:
        names: list[str] = []
        for klass in cls.__mro__:
            if "__init__" in vars(klass) and klass is not object:
                sig = inspect.signature(vars(klass)["__init__"])
                for name, p in sig.parameters.items():
                    if name != "self" and p.kind is not p.VAR_KEYWORD and name not in names:
                        names.append(name)
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> _GBDTBase:
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise InputError(f"unknown parameter {name!r} for {type(self).__name__}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # -- shared fitting ----------------------------------------------------------------------------

    def _boost_params(self, **task: Any) -> BoostParams:
        values = {
            name: getattr(self, name)
            for name in (
                "n_estimators",
                "learning_rate",
                "max_depth",
                "max_bin",
                "reg_lambda",
                "gamma",
                "min_child_weight",
                "min_samples_leaf",
                "subsample",
                "colsample_bytree",
                "goss",
                "top_rate",
                "other_rate",
                "base_score",
                "sparse_aware",
            )
        }
        values["seed"] = self.random_state
        values.update(task)
        return BoostParams().with_updates(**values)

    def _fit_booster(
        self,
        params: BoostParams,
        X: Any,
        y: F64,
        eval_set: Sequence[tuple[Any, Any]] | None,
        transform_y: Any,
    ) -> None:
        callbacks: list[Callback] = []
        sets = [(Xv, transform_y(yv)) for Xv, yv in (eval_set or [])]
        if self.early_stopping_rounds is not None:
            if not sets:
                raise InputError("early_stopping_rounds needs an eval_set")
            callbacks.append(EarlyStopping(int(self.early_stopping_rounds)))
        booster = train(params, X, y, eval_sets=sets, callbacks=callbacks)
        self.booster_ = booster
        self.n_features_in_ = booster.n_features
        self.best_iteration_ = booster.best_iteration
        gain = booster.feature_importance("gain")
        total = gain.sum()
        self.feature_importances_ = gain / total if total > 0 else gain

    def _booster(self) -> Booster:
        booster: Booster | None = getattr(self, "booster_", None)
        if booster is None:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")
        return booster


class GBDTClassifier(_GBDTBase):
    """Gradient-boosted trees for classification (binary logistic or softmax).

    ``multi_strategy`` picks one tree per class per round (default) or one multi-output tree
    with vector leaves.
    """

    def __init__(self, *, multi_strategy: str = "one_output_per_tree", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.multi_strategy = multi_strategy

    def fit(
        self, X: Any, y: Any, eval_set: Sequence[tuple[Any, Any]] | None = None
    ) -> GBDTClassifier:
        y_arr = np.asarray(y)
        if y_arr.ndim != 1 or y_arr.size == 0:
            raise InputError(f"y must be a non-empty 1-D array, got shape {y_arr.shape}")
        if y_arr.dtype.kind == "f" and not np.all(np.isfinite(y_arr)):
            raise InputError("labels contain NaN or infinite values")
        classes, encoded = np.unique(y_arr, return_inverse=True)
        if classes.size < 2:
            raise InputError("a classifier needs at least two classes in y")
        self.classes_ = classes
        lookup = {c: i for i, c in enumerate(classes.tolist())}

        def encode(v: Any) -> F64:
            try:
                return np.array([lookup[c] for c in np.asarray(v).tolist()], dtype=np.float64)
            except KeyError as exc:
                raise InputError(f"eval_set has a class not seen in y: {exc}") from None

        if classes.size == 2:
            params = self._boost_params(objective="binary:logistic")
        else:
            params = self._boost_params(
                objective="multi:softmax",
                num_class=int(classes.size),
                multi_strategy=self.multi_strategy,
            )
        self._fit_booster(params, X, encoded.astype(np.float64), eval_set, encode)
        return self

    def predict_proba(self, X: Any) -> F64:
        """Class probabilities ``(n, n_classes)`` in the order of ``classes_``."""
        p = self._booster().predict(X)
        return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p

    def predict(self, X: Any) -> npt.NDArray[Any]:
        """Most probable class of each row."""
        proba = self.predict_proba(X)
        return np.asarray(self.classes_[np.argmax(proba, axis=1)])


class GBDTRegressor(_GBDTBase):
    """Gradient-boosted trees for regression (``objective``: L2 by default)."""

    def __init__(
        self,
        *,
        objective: str = "reg:squarederror",
        huber_delta: float = 1.0,
        fair_c: float = 1.0,
        tweedie_variance_power: float = 1.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.objective = objective
        self.huber_delta = huber_delta
        self.fair_c = fair_c
        self.tweedie_variance_power = tweedie_variance_power

    def fit(
        self, X: Any, y: Any, eval_set: Sequence[tuple[Any, Any]] | None = None
    ) -> GBDTRegressor:
        params = self._boost_params(
            objective=self.objective,
            huber_delta=self.huber_delta,
            fair_c=self.fair_c,
            tweedie_variance_power=self.tweedie_variance_power,
        )
        if canonical_objective(params.objective) in {"binary:logistic", "multi:softmax"}:
            raise InputError("GBDTRegressor needs a regression objective")
        self._fit_booster(params, X, y, eval_set, lambda v: v)
        return self

    def predict(self, X: Any) -> F64:
        """Predicted values."""
        return self._booster().predict(X)
