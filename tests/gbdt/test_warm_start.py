"""Warm start: continuing a model gives exactly the trees of one uninterrupted training."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.callbacks import EarlyStopping
from p2pboost.gbdt.params import BoostParams

_FIELDS = ("feature", "threshold_bin", "threshold", "default_left", "left", "right", "value")


def _same(a: Booster, b: Booster) -> None:
    assert len(a.trees) == len(b.trees)
    for t, (x, y) in enumerate(zip(a.trees, b.trees, strict=True)):
        for field in _FIELDS:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=f"{t}")
    assert a.tree_output == b.tree_output


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"subsample": 0.7, "colsample_bytree": 0.6},  # the draws continue where they stopped
        {"goss": True},
    ],
    ids=["plain", "sampling", "goss"],
)
def test_three_then_three_is_six(extra: dict[str, Any]) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    params = BoostParams(n_estimators=6, max_depth=3, seed=11, **extra)
    whole = train(params, X, y)
    first = train(BoostParams(**{**params.to_dict(), "n_estimators": 3}), X, y)
    # Through the model file, as a user would continue it another day.
    first = Booster.from_dict(json.loads(json.dumps(first.to_dict())))
    more = train(BoostParams(**{**params.to_dict(), "n_estimators": 3}), X, y, init_model=first)
    _same(more, whole)
    np.testing.assert_array_equal(more.predict(X), whole.predict(X))
    assert len(first.trees) == 3  # the model continued is not changed


def test_multiclass_history_and_early_stopping_continue() -> None:
    X, y = load_diabetes(return_X_y=True)
    y = np.digitize(y, np.quantile(y, [0.33, 0.66])).astype(np.float64)
    params = BoostParams(objective="multi:softmax", num_class=3, n_estimators=4, max_depth=2)
    held = np.arange(y.size) % 3 == 0
    ev = [(X[held], y[held])]
    X, y = X[~held], y[~held]
    whole = train(dataclasses.replace(params, n_estimators=8), X, y, eval_sets=ev)
    first = train(params, X, y, eval_sets=ev)
    more = train(params, X, y, eval_sets=ev, init_model=first)
    _same(more, whole)
    assert more.history == whole.history  # one list of 8 rounds, not two of 4
    stopped = train(
        dataclasses.replace(params, n_estimators=50),
        X,
        y,
        eval_sets=ev,
        callbacks=[EarlyStopping(2)],
        init_model=first,
    )
    assert stopped.best_iteration is not None
    assert stopped.best_iteration >= first.n_rounds - 1  # counted across both trainings
    assert first.n_rounds < stopped.n_rounds < 54


def test_a_warm_start_keeps_what_shapes_the_trees() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    first = train(BoostParams(n_estimators=2, max_depth=2), X, y)
    with pytest.raises(InputError, match="max_bin"):
        train(BoostParams(n_estimators=2, max_bin=16), X, y, init_model=first)
    with pytest.raises(InputError, match="objective"):
        train(BoostParams(objective="reg:squarederror", n_estimators=2), X, y, init_model=first)
    with pytest.raises(InputError, match="features"):
        train(BoostParams(n_estimators=2), X[:, :5], y, init_model=first)
    broken = first.to_dict()
    broken["rng_state"] = {"bit_generator": "PCG64", "state": "nonsense"}
    with pytest.raises(ModelError, match="rng_state"):
        Booster.from_dict(broken)
