"""Feature names: kept in the model, and prediction input matched by name, not position."""

from __future__ import annotations

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.estimators import GBDTClassifier
from p2pboost.gbdt.names import by_name, check_names
from p2pboost.gbdt.params import BoostParams

Data = tuple[np.ndarray, np.ndarray]
PARAMS = BoostParams(n_estimators=4, max_depth=3)


def _frame(X: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(X[:, :6], columns=["age", "income", "debt", "tenure", "score", "limit"])


def test_a_model_keeps_the_names_and_matches_columns_by_name(
    breast: Data, tmp_path: object
) -> None:
    X, y = breast
    frame = _frame(X)
    model = train(PARAMS, frame, y)
    assert model.feature_names == list(frame.columns)
    reordered = frame[["limit", "debt", "age", "score", "tenure", "income"]]
    np.testing.assert_array_equal(model.predict(reordered), model.predict(frame))
    # By position, the reordered frame would have scored differently: the test can fail.
    assert not np.array_equal(model.predict(reordered.to_numpy()), model.predict(frame))
    np.testing.assert_array_equal(model.predict(frame.to_numpy()), model.predict(frame))
    with pytest.raises(InputError, match="yet now missing: debt"):
        model.predict(frame.drop(columns="debt"))
    with pytest.raises(InputError, match="unseen at fit time: bonus"):
        model.predict(frame.assign(bonus=1.0))
    again = Booster.from_dict(model.to_dict())
    assert again.feature_names == model.feature_names
    np.testing.assert_array_equal(again.predict(reordered), model.predict(frame))


def test_names_given_explicitly_and_checked(breast: Data) -> None:
    X, y = breast
    model = train(PARAMS, X[:, :3], y, feature_names=["a", "b", "c"])
    assert model.feature_names == ["a", "b", "c"]
    assert train(PARAMS, X[:, :3], y).feature_names is None  # an array has no names
    with pytest.raises(InputError, match="more than once: a"):
        check_names(["a", "b", "a"], 3)
    with pytest.raises(InputError, match="2 feature names for 3 features"):
        train(PARAMS, X[:, :3], y, feature_names=["a", "b"])
    broken = model.to_dict() | {"feature_names": ["a", "b"]}
    with pytest.raises(ModelError, match="feature names"):
        Booster.from_dict(broken)
    assert by_name(X, ["a"]) is X  # no names on the input: taken by position


def test_estimators_expose_feature_names_in(breast: Data) -> None:
    X, y = breast
    frame = _frame(X)
    clf = GBDTClassifier(n_estimators=3).fit(frame, y)
    assert clf.feature_names_in_.dtype == object
    assert clf.feature_names_in_.tolist() == list(frame.columns)
    shuffled = frame[frame.columns[::-1]]
    np.testing.assert_array_equal(clf.predict_proba(shuffled), clf.predict_proba(frame))
    clf.fit(frame.to_numpy(), y)
    assert not hasattr(clf, "feature_names_in_")
