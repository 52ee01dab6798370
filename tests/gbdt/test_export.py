"""XGBoost export: xgboost loads the file and predicts what the core predicts (float32)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb
from sklearn.datasets import load_diabetes

from p2pboost.app.cli import main
from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.export import to_xgboost
from p2pboost.gbdt.params import BoostParams

Data = tuple[np.ndarray, np.ndarray]


def _xgboost_predict(model: dict[str, object], X: np.ndarray, tmp_path: Path) -> np.ndarray:
    path = tmp_path / "xgb.json"
    path.write_text(json.dumps(model))
    booster = xgb.Booster()
    booster.load_model(str(path))
    names = model["learner"]["feature_names"]  # type: ignore[index]
    return np.asarray(booster.predict(xgb.DMatrix(X, feature_names=names or None)))


def test_binary_with_missing_values_predicts_the_same(breast: Data, tmp_path: Path) -> None:
    X, y = breast
    X = X.copy()
    X[np.random.default_rng(1).random(X.shape) < 0.1] = np.nan
    model = train(BoostParams(n_estimators=12, max_depth=4), X, y)
    ours = model.predict(X)
    theirs = _xgboost_predict(to_xgboost(model), X, tmp_path)
    np.testing.assert_allclose(theirs, ours, rtol=1e-6, atol=1e-6)


def test_regression_predicts_the_same(tmp_path: Path) -> None:
    X, y = load_diabetes(return_X_y=True)
    model = train(BoostParams(objective="reg:squarederror", n_estimators=10, max_depth=4), X, y)
    theirs = _xgboost_predict(to_xgboost(model), X, tmp_path)
    np.testing.assert_allclose(theirs, model.predict(X), rtol=1e-6)


def test_export_command_and_refusals(breast: Data, tmp_path: Path) -> None:
    X, y = breast
    model = train(BoostParams(n_estimators=3, max_depth=3), X, y)
    model.save(tmp_path / "model.json")
    assert main(["export", str(tmp_path / "model.json"), "--out", str(tmp_path / "x.json")]) == 0
    exported = json.loads((tmp_path / "x.json").read_text())
    np.testing.assert_allclose(
        _xgboost_predict(exported, X, tmp_path), model.predict(X), rtol=1e-6, atol=1e-6
    )
    softmax = train(BoostParams(objective="multi:softmax", num_class=2, n_estimators=1), X, y)
    with pytest.raises(InputError, match="not 'multi:softmax'"):
        to_xgboost(softmax)
