"""The plaintext estimators are scikit-learn estimators: its own checks, model selection, and
the same methods without scikit-learn installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.datasets import load_diabetes
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from p2pboost.exceptions import InputError, InputTypeError, NotFittedError
from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor

Data = tuple[np.ndarray, np.ndarray]


def _expected_failures(estimator: Any) -> dict[str, str]:
    # Weights are not rows: the bins are quantiles of every row given (weighted 0 or not) and
    # the base margin comes from the unweighted labels, so a zero weight is not a removed row
    # nor a weight of 2 a repeated one (scikit-learn's HistGradientBoosting differs the same
    # way); the trees then differ.
    weights = "bins and base margin from the rows, not the weights"
    return {
        # p2pboost computes with numpy (and big integers in the federated modes): an array
        # API namespace (CuPy, torch) is converted, never computed in.
        "check_array_api_input": "numpy only",
        "check_sample_weight_equivalence_on_dense_data": weights,
        "check_sample_weight_equivalence_on_sparse_data": weights,
    }


@parametrize_with_checks(
    [GBDTClassifier(n_estimators=5), GBDTRegressor(n_estimators=5)],
    expected_failed_checks=_expected_failures,
)
def test_scikit_learn_estimator_checks(estimator: Any, check: Any) -> None:
    check(estimator)


def test_model_selection(breast: Data) -> None:
    X, y = breast
    clf = GBDTClassifier(n_estimators=5, max_depth=2)
    assert is_classifier(clf)
    assert is_regressor(GBDTRegressor())
    scores = cross_val_score(clf, X, y, cv=3, scoring="roc_auc")
    assert scores.shape == (3,)
    assert scores.min() > 0.9
    search = GridSearchCV(clf, {"max_depth": [1, 3], "learning_rate": [0.1, 0.3]}, cv=3)
    search.fit(X, y)
    assert set(search.best_params_) == {"max_depth", "learning_rate"}
    assert search.best_estimator_.n_estimators == 5
    assert 0.9 < search.score(X, y) <= 1.0  # accuracy, from ClassifierMixin
    Xd, yd = load_diabetes(return_X_y=True)
    reg = clone(GBDTRegressor(n_estimators=20, max_depth=3)).fit(Xd, yd)
    assert 0.5 < reg.score(Xd, yd) <= 1.0  # R^2, from RegressorMixin


def test_errors_are_ours_and_scikit_learns(breast: Data) -> None:
    X, y = breast
    with pytest.raises(NotFittedError) as unfitted:
        GBDTClassifier().predict(X)
    assert isinstance(unfitted.value, SklearnNotFittedError)
    fitted = GBDTClassifier(n_estimators=2).fit(X, y)
    with pytest.raises(InputError, match="X has 29 features, but GBDTClassifier is expecting 30"):
        fitted.predict(X[:, 1:])
    with pytest.raises(InputError, match="Reshape your data"):
        fitted.predict(X[0])
    with pytest.raises(InputError, match="Unknown label type: continuous"):
        GBDTClassifier().fit(X, y + 0.5)
    with pytest.raises(InputTypeError, match="Complex data not supported"):
        GBDTRegressor().fit(X + 1j, y)
    with pytest.raises(InputError, match="requires y to be passed"):
        GBDTRegressor().fit(X, None)


def test_sparse_matrices_are_made_dense_with_zeros(breast: Data) -> None:
    from scipy import sparse  # type: ignore[import-untyped]

    X, y = breast
    X = np.where(X > np.median(X, axis=0), X, 0.0)
    dense = GBDTClassifier(n_estimators=3).fit(X, y)
    csr = GBDTClassifier(n_estimators=3).fit(sparse.csr_matrix(X), y)
    np.testing.assert_array_equal(dense.predict_proba(X), csr.predict_proba(sparse.csc_matrix(X)))


def test_without_scikit_learn_the_same_methods_work() -> None:
    """A party needs no scikit-learn: the estimators then derive from p2pboost's stand-ins."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["sklearn"] = None  # as if it were not installed
        import numpy as np
        import p2pboost
        from p2pboost.gbdt import _sklearn
        from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor
        from p2pboost.exceptions import NotFittedError
        assert not _sklearn.SKLEARN
        rng = np.random.default_rng(0)
        X = rng.normal(size=(200, 3))
        y = (X[:, 0] > 0).astype(int)
        clf = p2pboost.GBDTClassifier(n_estimators=3)
        assert clf.get_params()["n_estimators"] == 3
        assert clf.set_params(max_depth=2).max_depth == 2
        assert clf.fit(X, y).score(X, y) > 0.9
        assert GBDTRegressor(n_estimators=5).fit(X, X[:, 0]).score(X, X[:, 0]) > 0.5
        try:
            GBDTClassifier().predict(X)
        except NotFittedError:
            print("ok")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
