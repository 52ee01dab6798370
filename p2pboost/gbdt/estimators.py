"""scikit-learn estimators over :func:`~p2pboost.gbdt.booster.train`.

They are scikit-learn estimators when scikit-learn is installed (``BaseEstimator`` and the
classifier or regressor mixin, :mod:`p2pboost.gbdt._sklearn`): ``clone``, ``cross_val_score``,
``GridSearchCV``, ``is_classifier`` and ``check_estimator`` work; without it they keep the same
methods. Conventions (scikit-learn's): ``__init__`` only stores its arguments, each named in
its signature; ``fit`` validates them and returns ``self``; fitted attributes end in ``_``
(``booster_``, ``n_features_in_``, ``feature_names_in_`` when X had string column names,
``feature_importances_``, and ``classes_`` for the classifier); prediction input with column
names is matched to them by name. Errors are :class:`~p2pboost.exceptions.InputError` (a
``ValueError``) with the messages scikit-learn's checks look for.
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, InputTypeError, ModelError
from p2pboost.files import atomic_write
from p2pboost.gbdt._sklearn import (
    BaseEstimator,
    ClassifierMixin,
    DataConversionWarning,
    EstimatorNotFittedError,
    RegressorMixin,
)
from p2pboost.gbdt.booster import ESTIMATOR_FORMAT, Booster, train
from p2pboost.gbdt.callbacks import Callback, CallbackEnv, EarlyStopping
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.objectives import canonical_objective
from p2pboost.gbdt.params import BoostParams, DPParams
from p2pboost.gbdt.shap import booster_contributions

__all__ = ["ESTIMATOR_FORMAT", "GBDTClassifier", "GBDTRegressor"]

F64 = npt.NDArray[np.float64]


#: The boosting parameters both estimators take, by their BoostParams names (``seed`` is
#: ``random_state``).
_BOOST = (
    "dp",
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
    "colsample_bylevel",
    "colsample_bynode",
    "goss",
    "top_rate",
    "other_rate",
    "base_score",
    "sparse_aware",
    "monotone_constraints",
    "interaction_constraints",
)


class _GBDTBase(BaseEstimator):
    """What both estimators share: parameters, tags, input checks and fitting."""

    n_estimators: int
    learning_rate: float
    max_depth: int
    max_bin: int
    reg_lambda: float
    gamma: float
    min_child_weight: float
    min_samples_leaf: int
    subsample: float
    colsample_bytree: float
    colsample_bylevel: float
    colsample_bynode: float
    goss: bool
    top_rate: float
    other_rate: float
    base_score: float | None
    sparse_aware: bool | str
    early_stopping_rounds: int | None
    random_state: int
    eval_metric: str | Sequence[str] | None
    verbose: bool | int

    # -- scikit-learn protocol -------------------------------------------------------------------

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return sorted(name for name in sig.parameters if name != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> _GBDTBase:
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise InputError(f"unknown parameter {name!r} for {type(self).__name__}")
            setattr(self, name, value)
        return self

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN is a missing value, with a learned direction
        tags.input_tags.sparse = True  # made dense (implicit entries are zeros)
        return tags

    # -- input checks ------------------------------------------------------------------------------

    def _y(self, y: Any) -> npt.NDArray[Any]:
        """``y`` as a 1-D array (a column vector is flattened, with scikit-learn's warning)."""
        if y is None:
            raise InputError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        arr = np.asarray(y)
        if arr.dtype.kind == "c":
            raise InputTypeError("Complex data not supported: y holds complex numbers")
        if arr.ndim == 2 and arr.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected; it is flattened "
                "(pass y.ravel() to say so)",
                DataConversionWarning,
                stacklevel=3,
            )
            arr = arr[:, 0]
        if arr.ndim != 1 or arr.size == 0:
            raise InputError(f"y must be a non-empty 1-D array, got shape {arr.shape}")
        return arr

    def _X(self, X: Any) -> Features:
        """``X`` for prediction, checked once: columns matched by name when both X and the
        model have names (:mod:`p2pboost.gbdt.names`), then the model's number of features."""
        booster = self._booster()
        features = Features.from_user(X, order=booster.feature_names)
        if features.n_features != self.n_features_in_:
            raise InputError(
                f"X has {features.n_features} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )
        return features

    # -- shared fitting ----------------------------------------------------------------------------

    def _boost_params(self, **task: Any) -> BoostParams:
        values = {name: getattr(self, name) for name in _BOOST}
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
        sample_weight: Any = None,
    ) -> None:
        callbacks: list[Callback] = []
        sets = [(Xv, transform_y(yv)) for Xv, yv in (eval_set or [])]
        if self.verbose:
            callbacks.append(_Printer(int(self.verbose)))
        if self.early_stopping_rounds is not None:
            if not sets:
                raise InputError("early_stopping_rounds needs an eval_set")
            callbacks.append(EarlyStopping(int(self.early_stopping_rounds)))
        metrics = [self.eval_metric] if isinstance(self.eval_metric, str) else self.eval_metric
        booster = train(
            params,
            X,
            y,
            eval_sets=sets,
            eval_metrics=None if metrics is None else list(metrics),
            callbacks=callbacks,
            sample_weight=sample_weight,
        )
        if booster.feature_names is None and hasattr(self, "feature_names_in_"):
            del self.feature_names_in_  # a refit on data without names
        self._fitted_from(booster)

    def _fitted_from(self, booster: Booster) -> None:
        """The fitted attributes that follow from a booster (after fit, or a model file)."""
        self.booster_ = booster
        self.n_features_in_ = booster.n_features
        if booster.feature_names is not None:
            self.feature_names_in_ = np.asarray(booster.feature_names, dtype=object)
        self.best_iteration_ = booster.best_iteration
        self.evals_result_ = {
            s: {m: list(v) for m, v in per.items()} for s, per in booster.history.items()
        }
        gain = booster.feature_importance("gain")
        total = gain.sum()
        self.feature_importances_ = gain / total if total > 0 else gain

    # -- model files ----------------------------------------------------------------------------

    def save_model(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted estimator as JSON (atomically): its parameters, ``classes_`` and the
        booster with its feature names and history; :meth:`load_model` reads it back."""
        classes = getattr(self, "classes_", None)
        body = {
            "format": ESTIMATOR_FORMAT,
            "version": 1,
            "estimator": type(self).__name__,
            "params": self.get_params(),
            "classes": None if classes is None else np.asarray(classes).tolist(),
            "booster": self._booster().to_dict(),
        }
        atomic_write(path, json.dumps(body).encode("utf-8"))

    @classmethod
    def load_model(cls, path: str | os.PathLike[str]) -> Self:
        """An estimator fitted from a file of :meth:`save_model` (the same class only)."""
        try:
            body = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read model file {os.fspath(path)!r}: {exc}") from None
        if not isinstance(body, dict) or body.get("format") != ESTIMATOR_FORMAT:
            raise ModelError(f"{os.fspath(path)!r} is not a p2pboost estimator file")
        if body.get("estimator") != cls.__name__:
            raise ModelError(
                f"{os.fspath(path)!r} holds a {body.get('estimator')}, not a {cls.__name__}"
            )
        estimator = cls(**dict(body["params"]))
        estimator._fitted_from(Booster.from_dict(body["booster"]))
        estimator._restore_task(body.get("classes"))
        return estimator

    def _restore_task(self, classes: Any) -> None:
        """What a model file keeps of the task beyond the booster (the classifier's classes)."""

    def _booster(self) -> Booster:
        booster: Booster | None = getattr(self, "booster_", None)
        if booster is None:
            raise EstimatorNotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit first"
            )
        return booster


class GBDTClassifier(ClassifierMixin, _GBDTBase):
    """Gradient-boosted trees for classification (binary logistic or softmax).

    ``multi_strategy`` picks one tree per class per round (default) or one multi-output tree
    with vector leaves. The other parameters are :class:`~p2pboost.gbdt.params.BoostParams`'
    (``random_state`` is its ``seed``).
    """

    multi_strategy: str

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
        colsample_bylevel: float = 1.0,
        colsample_bynode: float = 1.0,
        goss: bool = False,
        top_rate: float = 0.2,
        other_rate: float = 0.1,
        base_score: float | None = None,
        sparse_aware: bool | str = "auto",
        early_stopping_rounds: int | None = None,
        random_state: int = 0,
        eval_metric: str | Sequence[str] | None = None,
        verbose: bool | int = False,
        dp: DPParams | dict[str, Any] | None = None,
        monotone_constraints: Any = None,
        interaction_constraints: Any = None,
        multi_strategy: str = "one_output_per_tree",
    ) -> None:
        _store(self, locals())

    def fit(
        self,
        X: Any,
        y: Any,
        eval_set: Sequence[tuple[Any, Any]] | None = None,
        sample_weight: Any = None,
    ) -> GBDTClassifier:
        """Fit on ``X`` and class labels ``y``; ``sample_weight`` (>= 0 per row) multiplies
        each row's gradient and hessian (see :func:`~p2pboost.gbdt.booster.train`)."""
        y_arr = self._y(y)
        if y_arr.dtype.kind == "f":
            if not np.all(np.isfinite(y_arr)):
                raise InputError("labels contain NaN or infinite values")
            if np.any(y_arr != np.round(y_arr)):
                raise InputError(
                    "Unknown label type: continuous. A classifier needs class labels (integers, "
                    "strings or booleans); for a numeric target use GBDTRegressor"
                )
        classes, encoded = np.unique(y_arr, return_inverse=True)
        if classes.size < 2:
            raise InputError(
                f"y has 1 class ({classes[0]!r}); a classifier needs two classes or more"
            )
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
        self._fit_booster(params, X, encoded.astype(np.float64), eval_set, encode, sample_weight)
        return self

    def _restore_task(self, classes: Any) -> None:
        if classes is None:
            raise ModelError("a classifier's file must hold its classes")
        self.classes_ = np.asarray(classes)

    def predict_proba(self, X: Any) -> F64:
        """Class probabilities ``(n, n_classes)`` in the order of ``classes_``."""
        p = self._booster().predict(self._X(X))
        return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p

    def predict(self, X: Any, *, pred_contribs: bool = False) -> npt.NDArray[Any]:
        """Most probable class of each row; ``pred_contribs=True``: the exact TreeSHAP
        contributions to the margin instead (:func:`~p2pboost.gbdt.shap.booster_contributions`,
        XGBoost's layout and spelling)."""
        if pred_contribs:
            return booster_contributions(self._booster(), self._X(X))
        proba = self.predict_proba(X)
        return np.asarray(self.classes_[np.argmax(proba, axis=1)])


class GBDTRegressor(RegressorMixin, _GBDTBase):
    """Gradient-boosted trees for regression (``objective``: L2 by default; ``huber_delta``,
    ``fair_c`` and ``tweedie_variance_power`` shape the objectives that take them). The other
    parameters are :class:`~p2pboost.gbdt.params.BoostParams`' (``random_state`` is its
    ``seed``; ``dp`` as in the classifier)."""

    objective: str
    huber_delta: float
    fair_c: float
    tweedie_variance_power: float

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
        colsample_bylevel: float = 1.0,
        colsample_bynode: float = 1.0,
        goss: bool = False,
        top_rate: float = 0.2,
        other_rate: float = 0.1,
        base_score: float | None = None,
        sparse_aware: bool | str = "auto",
        early_stopping_rounds: int | None = None,
        random_state: int = 0,
        eval_metric: str | Sequence[str] | None = None,
        verbose: bool | int = False,
        dp: DPParams | dict[str, Any] | None = None,
        monotone_constraints: Any = None,
        interaction_constraints: Any = None,
        objective: str = "reg:squarederror",
        huber_delta: float = 1.0,
        fair_c: float = 1.0,
        tweedie_variance_power: float = 1.5,
    ) -> None:
        _store(self, locals())

    def fit(
        self,
        X: Any,
        y: Any,
        eval_set: Sequence[tuple[Any, Any]] | None = None,
        sample_weight: Any = None,
    ) -> GBDTRegressor:
        """Fit on ``X`` and targets ``y``; ``sample_weight`` as in the classifier."""
        params = self._boost_params(
            objective=self.objective,
            huber_delta=self.huber_delta,
            fair_c=self.fair_c,
            tweedie_variance_power=self.tweedie_variance_power,
        )
        if canonical_objective(params.objective) in {"binary:logistic", "multi:softmax"}:
            raise InputError("GBDTRegressor needs a regression objective")
        self._fit_booster(params, X, self._y(y), eval_set, lambda v: v, sample_weight)
        return self

    def predict(self, X: Any, *, pred_contribs: bool = False) -> F64:
        """Predicted values; ``pred_contribs=True``: their TreeSHAP contributions (as the
        classifier's)."""
        if pred_contribs:
            return booster_contributions(self._booster(), self._X(X))
        return self._booster().predict(self._X(X))


class _Printer:
    """``verbose``: print the evaluation every ``every`` rounds (and the first), as XGBoost."""

    def __init__(self, every: int) -> None:
        self.every = max(1, every)

    def __call__(self, env: CallbackEnv) -> None:
        if env.iteration % self.every and env.iteration + 1 != env.n_estimators:
            return
        scores = "  ".join(
            f"{name}-{metric}:{value:.5f}"
            for name, per in env.evaluation.items()
            for metric, value in per.items()
        )
        print(f"[{env.iteration}]  {scores}", flush=True)


def _store(estimator: _GBDTBase, arguments: dict[str, Any]) -> None:
    """``__init__``'s arguments as attributes, unchanged (scikit-learn validates in ``fit``)."""
    for name, value in arguments.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)
