"""ONNX export: ONNX Runtime loads the graph and predicts what the core predicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]
import pytest

from p2pboost.app.cli import main
from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.export_onnx import to_onnx
from p2pboost.gbdt.params import BoostParams


def _data(n: int = 1500) -> np.ndarray:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, 5))
    X[rng.random(X.shape) < 0.1] = np.nan  # missing values take each split's direction
    return X


def _onnx_predict(model: bytes, X: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"X": X})[0])


def _ours(booster: Booster, X: np.ndarray) -> np.ndarray:
    p = booster.predict(X)
    return p[:, None] if p.ndim == 1 else p


X = _data()
Z = np.nan_to_num(X)
CASES = {
    "binary": (BoostParams(n_estimators=8, max_depth=4), (Z[:, 0] + Z[:, 1] > 0).astype(float)),
    "regression": (BoostParams(objective="reg:squarederror", n_estimators=8), 3 * Z[:, 0]),
    "huber": (BoostParams(objective="reg:pseudohubererror", n_estimators=4), Z[:, 1]),
    "tweedie": (BoostParams(objective="reg:tweedie", n_estimators=4), np.exp(Z[:, 0])),
    "softmax": (
        BoostParams(objective="multi:softmax", num_class=3, n_estimators=4),
        (Z[:, 0] > 0).astype(float) + (Z[:, 1] > 0),
    ),
    "vector leaves": (
        BoostParams(
            objective="multi:softmax",
            num_class=3,
            n_estimators=4,
            multi_strategy="multi_output_tree",
        ),
        (Z[:, 0] > 0).astype(float) + (Z[:, 1] > 0),
    ),
    "single-leaf trees": (BoostParams(n_estimators=2, gamma=1e9), (Z[:, 0] > 0).astype(float)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_onnx_runtime_predicts_what_the_core_predicts(case: str) -> None:
    params, y = CASES[case]
    booster = train(params, X, y)
    theirs = _onnx_predict(to_onnx(booster), X)
    assert theirs.dtype == np.float64
    np.testing.assert_allclose(theirs, _ours(booster, X), rtol=1e-12, atol=1e-12)


def test_best_iteration_and_the_command(tmp_path: Path) -> None:
    params, y = CASES["binary"]
    booster = train(params, X, y)
    booster.best_iteration = 2  # prediction stops at round 3: so does the graph
    booster.save(tmp_path / "model.json")
    out = tmp_path / "model.onnx"
    assert (
        main(["export", str(tmp_path / "model.json"), "--format", "onnx", "--out", str(out)]) == 0
    )
    theirs = _onnx_predict(out.read_bytes(), X)
    np.testing.assert_allclose(theirs, _ours(booster, X), rtol=1e-12, atol=1e-12)
    assert not np.allclose(theirs[:, 0], booster.predict(X, n_rounds=8))


def test_models_with_categorical_columns_are_refused() -> None:
    import pandas as pd  # type: ignore[import-untyped]

    frame = pd.DataFrame({"a": Z[:, 0], "c": pd.Categorical(np.where(Z[:, 1] > 0, "x", "y"))})
    booster = train(BoostParams(n_estimators=2), frame, (Z[:, 0] > 0).astype(float))
    with pytest.raises(InputError, match="categorical columns"):
        to_onnx(booster)
