"""scikit-learn's estimator bases when scikit-learn is installed, small stand-ins otherwise.

scikit-learn is not a run-time dependency of p2pboost (a party needs none of it), but a data
scientist who has it expects the estimators to *be* scikit-learn estimators: ``clone``,
``cross_val_score``, ``GridSearchCV``, ``is_classifier`` and the estimator checks all read
``BaseEstimator``'s protocol and ``__sklearn_tags__``. So the estimators derive from
scikit-learn's classes when it can be imported (as LightGBM and XGBoost do), and from the
stand-ins below otherwise, which give the same ``get_params``/``set_params``/``score``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from p2pboost.exceptions import NotFittedError

__all__ = [
    "SKLEARN",
    "BaseEstimator",
    "ClassifierMixin",
    "DataConversionWarning",
    "EstimatorNotFittedError",
    "RegressorMixin",
]

if TYPE_CHECKING:  # scikit-learn has no type information: what the estimators use of it

    class BaseEstimator:
        def __sklearn_tags__(self) -> Any: ...

    class ClassifierMixin:
        def score(self, X: Any, y: Any, sample_weight: Any = None) -> float: ...

    class RegressorMixin:
        def score(self, X: Any, y: Any, sample_weight: Any = None) -> float: ...

    class DataConversionWarning(UserWarning): ...

    SKLEARN = True

    class EstimatorNotFittedError(NotFittedError):
        """:class:`p2pboost.exceptions.NotFittedError`, and scikit-learn's when it is there."""

else:
    try:
        from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
        from sklearn.exceptions import DataConversionWarning
        from sklearn.exceptions import NotFittedError as _SklearnNotFitted

        SKLEARN = True

        class EstimatorNotFittedError(NotFittedError, _SklearnNotFitted):
            """:class:`p2pboost.exceptions.NotFittedError` and scikit-learn's, so that code
            written against either catches it."""

    except ImportError:  # pragma: no cover - the test environment has scikit-learn
        SKLEARN = False
        EstimatorNotFittedError = NotFittedError

        class DataConversionWarning(UserWarning):
            """Data were converted to the form the estimator needs (scikit-learn's name)."""

        class BaseEstimator:
            """Parameters are the ``__init__`` arguments (see the estimators' own methods)."""

        class ClassifierMixin:
            _estimator_type = "classifier"

            def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
                """Mean accuracy (weighted by ``sample_weight``), as scikit-learn's."""
                hit = np.asarray(self.predict(X)) == np.asarray(y)
                return float(np.average(hit, weights=sample_weight))

        class RegressorMixin:
            _estimator_type = "regressor"

            def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
                """Coefficient of determination R^2, as scikit-learn's."""
                y = np.asarray(y, dtype=np.float64)
                w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
                err = np.average((y - self.predict(X)) ** 2, weights=w)
                var = np.average((y - np.average(y, weights=w)) ** 2, weights=w)
                return float(1.0 - err / var) if var > 0 else 0.0
