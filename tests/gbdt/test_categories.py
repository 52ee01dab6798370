"""Categorical and string columns of a DataFrame: an ordinal encoding kept in the model and
applied by value at prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.estimators import GBDTClassifier
from p2pboost.gbdt.metrics import auc
from p2pboost.gbdt.params import BoostParams

PARAMS = BoostParams(n_estimators=4, max_depth=3)


def _frame(n: int = 600) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(0)
    plan = rng.choice(["basic", "gold", "platinum"], size=n)
    region = pd.Categorical(rng.choice(["north", "south"], size=n), categories=["south", "north"])
    income = rng.normal(size=n)
    y = ((plan == "platinum") | ((plan == "gold") & (income > 0))).astype(np.float64)
    return pd.DataFrame({"plan": plan, "region": region, "income": income}), y


def test_categories_are_learned_kept_and_applied_by_value(tmp_path: Path) -> None:
    X, y = _frame()
    model = train(PARAMS, X, y)
    assert model.categories == {"plan": ["basic", "gold", "platinum"], "region": ["south", "north"]}
    assert auc(y, model.predict(X)) > 0.99  # it learned from the strings
    model.save(tmp_path / "m.json")
    again = Booster.load(tmp_path / "m.json")
    # Another category order and another column order score the same rows the same.
    other = X[["income", "region", "plan"]].copy()
    other["region"] = other["region"].cat.reorder_categories(["north", "south"])
    np.testing.assert_array_equal(again.predict(other), model.predict(X))
    # An unseen category and a missing value are missing values, not errors.
    odd = X.head(2).copy()
    odd["plan"] = ["diamond", None]
    assert np.isfinite(again.predict(odd)).all()


def test_estimators_and_evaluation_sets_take_categorical_frames() -> None:
    X, y = _frame()
    clf = GBDTClassifier(n_estimators=3, eval_metric="auc")
    clf.fit(X[:400], y[:400], eval_set=[(X[400:], y[400:])])
    assert clf.evals_result_["valid_0"]["auc"][-1] > 0.9
    assert clf.feature_names_in_.tolist() == ["plan", "region", "income"]
    with pytest.raises(ValueError, match=r"numeric 2-D array"):
        train(PARAMS, X.to_numpy(), y)  # strings without a frame's names: refused, as before
