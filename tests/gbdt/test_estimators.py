from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_iris

from p2pboost.exceptions import InputError, NotFittedError
from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor

Data = tuple[np.ndarray, np.ndarray]


def test_classifier_fit_predict(breast: Data) -> None:
    X, y = breast
    labels = np.where(y == 1, "benign", "malignant")
    clf = GBDTClassifier(n_estimators=5, max_depth=3)
    assert clf.fit(X, labels) is clf
    assert clf.classes_.tolist() == ["benign", "malignant"]
    assert clf.n_features_in_ == X.shape[1]
    proba = clf.predict_proba(X)
    assert proba.shape == (len(X), 2)
    assert np.allclose(proba.sum(axis=1), 1.0)
    assert np.mean(clf.predict(X) == labels) > 0.95
    assert clf.feature_importances_.sum() == pytest.approx(1.0)
    assert clf.booster_.n_rounds == 5


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_multiclass_classifier(strategy: str) -> None:
    X, y = load_iris(return_X_y=True)
    clf = GBDTClassifier(n_estimators=5, max_depth=3, multi_strategy=strategy).fit(X, y)
    assert clf.predict_proba(X).shape == (150, 3)
    assert np.mean(clf.predict(X) == y) > 0.95


def test_regressor_with_early_stopping() -> None:
    X, y = load_diabetes(return_X_y=True)
    reg = GBDTRegressor(n_estimators=200, max_depth=3, early_stopping_rounds=3)
    reg.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])])
    assert reg.best_iteration_ is not None
    assert reg.booster_.n_rounds < 200
    assert reg.predict(X).shape == (len(X),)


def test_params_protocol_and_clone() -> None:
    clf = GBDTClassifier(max_depth=3, multi_strategy="multi_output_tree")
    params = clf.get_params()
    assert params["max_depth"] == 3
    assert params["multi_strategy"] == "multi_output_tree"
    copy = clone(clf)
    assert copy.get_params() == params
    assert copy is not clf
    assert clf.set_params(max_depth=4).max_depth == 4
    with pytest.raises(InputError, match="unknown parameter"):
        clf.set_params(depth=4)
    assert "max_depth=4" in repr(clf)
    assert "objective" in GBDTRegressor().get_params()


def test_estimator_errors(breast: Data) -> None:
    X, y = breast
    with pytest.raises(NotFittedError):
        GBDTClassifier().predict(X)
    with pytest.raises(InputError, match="two classes"):
        GBDTClassifier().fit(X, np.zeros(len(X)))
    with pytest.raises(InputError, match="NaN"):
        GBDTClassifier().fit(X, np.full(len(X), np.nan))
    with pytest.raises(InputError, match="max_bin"):
        GBDTClassifier(max_bin=1).fit(X, y)
    with pytest.raises(InputError, match="regression objective"):
        GBDTRegressor(objective="binary:logistic").fit(X, y)
    with pytest.raises(InputError, match="eval_set"):
        GBDTRegressor(early_stopping_rounds=2).fit(X, y)
    with pytest.raises(InputError, match="not seen"):
        GBDTClassifier(n_estimators=1).fit(X, y, eval_set=[(X, y + 5)])


def test_sample_weight(breast: Data) -> None:
    X, y = breast
    ones = GBDTClassifier(n_estimators=3).fit(X, y, sample_weight=np.ones(len(y)))
    plain = GBDTClassifier(n_estimators=3).fit(X, y)
    np.testing.assert_array_equal(ones.predict_proba(X), plain.predict_proba(X))
    w = np.where(y == 1, 5.0, 1.0)
    weighted = GBDTClassifier(n_estimators=3).fit(X, y, sample_weight=w)
    assert weighted.predict_proba(X)[:, 1].mean() > plain.predict_proba(X)[:, 1].mean()
    with pytest.raises(InputError, match="one value per row"):
        GBDTClassifier().fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(InputError, match="finite and >= 0"):
        GBDTRegressor().fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(InputError, match="zero for every row"):
        GBDTRegressor().fit(X, y, sample_weight=np.zeros(len(y)))


def test_eval_metric_verbose_and_evals_result(
    breast: Data, capsys: pytest.CaptureFixture[str]
) -> None:
    X, y = breast
    clf = GBDTClassifier(n_estimators=4, eval_metric=["auc", "ks"], verbose=2)
    clf.fit(X[:400], y[:400], eval_set=[(X[400:], y[400:])])
    assert set(clf.evals_result_) == {"valid_0"}
    assert set(clf.evals_result_["valid_0"]) == {"auc", "ks"}
    assert len(clf.evals_result_["valid_0"]["auc"]) == 4
    printed = capsys.readouterr().out.splitlines()
    assert [line.split("]")[0] for line in printed] == ["[0", "[2", "[3"]  # every 2nd, and last
    assert "valid_0-auc:" in printed[0]
    assert GBDTClassifier(n_estimators=2, eval_metric="auc").fit(X, y).evals_result_ == {}


def test_save_and_load_model_keep_classes_names_and_predictions(
    breast: Data, tmp_path: Path
) -> None:
    import pandas as pd  # type: ignore[import-untyped]

    from p2pboost.exceptions import ModelError

    X, y = breast
    frame = pd.DataFrame(X[:, :5], columns=[f"c{j}" for j in range(5)])
    labels = np.where(y == 1, "benign", "malignant")
    clf = GBDTClassifier(n_estimators=3, max_depth=3).fit(frame, labels)
    clf.save_model(tmp_path / "clf.json")
    again = GBDTClassifier.load_model(tmp_path / "clf.json")
    assert again.classes_.tolist() == ["benign", "malignant"]
    assert again.feature_names_in_.tolist() == list(frame.columns)
    assert again.get_params() == clf.get_params()
    np.testing.assert_array_equal(again.predict_proba(frame), clf.predict_proba(frame))
    assert (again.predict(frame) == clf.predict(frame)).all()
    with pytest.raises(ModelError, match="holds a GBDTClassifier, not a GBDTRegressor"):
        GBDTRegressor.load_model(tmp_path / "clf.json")
    from p2pboost.app.model_info import describe

    assert [f["name"] for f in describe(tmp_path / "clf.json")["features"]][:2] == ["c0", "c1"]
    reg = GBDTRegressor(n_estimators=2).fit(X, y)
    reg.save_model(tmp_path / "reg.json")
    loaded = GBDTRegressor.load_model(tmp_path / "reg.json")
    np.testing.assert_array_equal(loaded.predict(X), reg.predict(X))
