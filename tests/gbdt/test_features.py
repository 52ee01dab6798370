"""A party's features as one checked value: what ``Features.from_user`` finds, and that handing
the value to a public entry point gives what the raw data gives."""

from __future__ import annotations

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
import scipy.sparse as sp  # type: ignore[import-untyped]

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.params import BoostParams


def test_a_frame_is_encoded_ordered_and_checked_once() -> None:
    frame = pd.DataFrame(
        {"b": [1.0, np.nan, 3.0], "a": pd.Categorical(["x", "y", "z"]), "c": [0.0, 1.0, 2.0]}
    )
    features = Features.from_user(frame, categories={"a": ["z", "x"]}, order=["a", "b", "c"])
    assert features.names == ("a", "b", "c")
    assert features.categories == {"a": ["z", "x"]}
    assert features.has_missing
    assert not features.is_sparse
    assert (features.n_rows, features.n_features) == (3, 3)
    np.testing.assert_array_equal(features.column(0), [1.0, np.nan, 0.0])  # y: unknown
    assert Features.from_user(features) is features  # taken as it is
    with pytest.raises(InputError, match="3 features, the model expects 2"):
        Features.from_user(features, n_features=2)
    with pytest.raises(InputError, match="unseen at fit time: c"):
        Features.from_user(frame, order=["a", "b"])


def test_a_checked_value_is_reordered_by_a_model_s_names() -> None:
    features = Features.from_user(pd.DataFrame({"b": [1.0, 2.0], "a": [3.0, 4.0]}))
    again = Features.from_user(features, order=["a", "b"])
    assert again.names == ("a", "b")
    np.testing.assert_array_equal(again.dense(), [[3.0, 1.0], [4.0, 2.0]])


def test_sparse_features_stay_sparse_unless_asked() -> None:
    X = sp.csr_matrix(np.array([[0.0, 2.0], [np.nan, 0.0], [1.0, 0.0]]))
    kept = Features.from_user(X, sparse=True)
    assert kept.is_sparse
    assert kept.has_missing
    np.testing.assert_array_equal(kept.columns(np.array([1, 0])), [[2, 0, 0], [0, np.nan, 1]])
    np.testing.assert_array_equal(kept.rows(np.array([2, 0])).dense(), [[1.0, 0.0], [0.0, 2.0]])
    dense = Features.from_user(kept)  # a dense entry point makes it dense
    assert not dense.is_sparse
    np.testing.assert_array_equal(dense.dense(), X.toarray())
    assert not Features.from_user(np.ones((2, 2))).has_missing


def test_training_on_the_value_gives_the_trees_of_the_raw_data() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 3)), columns=["x0", "x1", "x2"])
    frame["k"] = pd.Categorical(rng.choice(["p", "q", "r"], size=200))
    y = (frame["x0"] + (frame["k"] == "q") > 0.5).to_numpy(dtype=np.float64)
    params = BoostParams(n_estimators=3, max_depth=3)
    raw = train(params, frame, y)
    features = Features.from_user(frame, categories=raw.categories)
    checked = train(params, features, y)
    assert checked.feature_names == raw.feature_names
    assert checked.categories == raw.categories
    np.testing.assert_array_equal(checked.predict_margin(features), raw.predict_margin(frame))
    for a, b in zip(checked.trees, raw.trees, strict=True):
        np.testing.assert_array_equal(a.feature, b.feature)
        np.testing.assert_array_equal(a.value, b.value)
