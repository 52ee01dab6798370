"""TreeSHAP: additive, equal to XGBoost's pred_contribs, equal to brute-force Shapley values."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import xgboost as xgb

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor
from p2pboost.gbdt.export import to_xgboost
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.shap import (
    booster_contributions,
    ensemble_contributions,
    expected_value,
    feature_players,
    reason_codes,
    tree_contributions,
)
from p2pboost.gbdt.tree import Tree
from p2pboost.homo.estimators import HomoClient


def _data(n: int, f: int, seed: int, missing: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Two decimals: no value is a float32 neighbour of a cut (see the export module).
    X = np.round(rng.normal(size=(n, f)), 2)
    y = (X[:, 0] + X[:, 1] * X[:, 2] - 0.5 * X[:, 3] + rng.normal(size=n) > 0).astype(float)
    X[rng.random(X.shape) < missing] = np.nan
    return X, y


def _margin(model: Booster, X: np.ndarray) -> np.ndarray:
    m = model.predict_margin(X)
    return m[:, 0] if m.shape[1] == 1 else m


# -- brute force: the Shapley values of the path-dependent game, coalition by coalition ------


def _coalition_value(tree: Tree, go_left: np.ndarray, players: np.ndarray, S: set[int]) -> float:
    """E[f | x_S] along the tree: follow the row at splits of players in S, else average
    the children by their cover share."""

    def rec(nd: int) -> float:
        if tree.feature[nd] < 0 and tree.owner[nd] < 0:
            return float(tree.value[nd, 0])
        lk, rk = int(tree.left[nd]), int(tree.right[nd])
        if int(players[nd]) in S:
            return rec(lk if go_left[nd] else rk)
        c = tree.cover[nd]
        return (tree.cover[lk] * rec(lk) + tree.cover[rk] * rec(rk)) / c

    return rec(0)


def _brute_force(tree: Tree, go_left: np.ndarray, players: np.ndarray, n: int) -> np.ndarray:
    phi = np.zeros(n + 1)
    for i in range(n):
        others = [p for p in range(n) if p != i]
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for S in itertools.combinations(others, size):
                with_i = _coalition_value(tree, go_left, players, {*S, i})
                phi[i] += weight * (with_i - _coalition_value(tree, go_left, players, set(S)))
    phi[n] = _coalition_value(tree, go_left, players, set())
    return phi


@pytest.mark.parametrize("grouped", [False, True])
def test_equals_brute_force_shapley_values(grouped: bool) -> None:
    X, y = _data(300, 6, seed=3)
    model = train(BoostParams(n_estimators=3, max_depth=4, learning_rate=0.5), X, y)
    groups = np.array([0, 1, 1, 2, 0, 2]) if grouped else None
    n_players = 3 if grouped else 6
    rows = X[:12]
    for tree in model.trees:
        players = feature_players(tree, groups)
        go_left = tree.local_decisions_raw(rows)
        ours = tree_contributions(tree, go_left, players, n_players)[:, :, 0]
        for r in range(rows.shape[0]):
            expected = _brute_force(tree, go_left[:, r], players, n_players)
            np.testing.assert_allclose(ours[r], expected, rtol=0, atol=1e-9)
            assert abs(ours[r].sum() - tree.predict_raw(rows[r : r + 1])[0, 0]) < 1e-9


def test_grouped_values_are_not_sums_of_per_feature_values() -> None:
    """The group game differs from the feature game: computed, not derived."""
    X, y = _data(400, 4, seed=5, missing=0.0)
    model = train(BoostParams(n_estimators=4, max_depth=4), X, y)
    groups = np.array([0, 0, 1, 1])
    grouped = booster_contributions(model, X, groups=groups)
    per_feature = booster_contributions(model, X)
    summed = np.column_stack([per_feature[:, :2].sum(1), per_feature[:, 2:4].sum(1)])
    assert np.abs(grouped[:, :2] - summed).max() > 1e-6
    np.testing.assert_allclose(grouped.sum(1), per_feature.sum(1), rtol=0, atol=1e-9)
    np.testing.assert_allclose(grouped[:, 2], per_feature[:, 4], rtol=0, atol=1e-12)


def test_a_child_without_cover_is_handled() -> None:
    """A cold child with zero cover weighs nothing (min_child_weight=0 allows it)."""
    tree = Tree(
        feature=np.array([0, 1, -1, -1, -1]),
        threshold_bin=np.array([0, 0, -1, -1, -1]),
        threshold=np.array([0.5, 0.5, np.inf, np.inf, np.inf]),
        default_left=np.zeros(5, dtype=bool),
        left=np.array([1, 3, -1, -1, -1]),
        right=np.array([2, 4, -1, -1, -1]),
        value=np.array([[0.0], [0.0], [2.0], [-1.0], [3.0]]),
        gain=np.zeros(5),
        cover=np.array([10.0, 4.0, 6.0, 0.0, 4.0]),
        depth=2,
    )
    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    go_left = tree.local_decisions_raw(X)
    players = feature_players(tree)
    ours = tree_contributions(tree, go_left, players, 2)[:, :, 0]
    for r in range(X.shape[0]):
        np.testing.assert_allclose(ours[r], _brute_force(tree, go_left[:, r], players, 2))
    np.testing.assert_allclose(ours.sum(1), tree.predict_raw(X)[:, 0], atol=1e-12)
    assert expected_value(tree)[0] == pytest.approx(0.4 * 3.0 + 0.6 * 2.0)


# -- XGBoost and additivity -------------------------------------------------------------------


def _xgboost_contribs(model: Booster, X: np.ndarray) -> np.ndarray:
    booster = xgb.Booster()
    booster.load_model(
        bytearray(json.dumps(to_xgboost(model, with_statistics=True)).encode("utf-8"))
    )
    return np.asarray(booster.predict(xgb.DMatrix(X), pred_contribs=True), dtype=np.float64)


@pytest.mark.parametrize("objective", ["binary:logistic", "reg:squarederror"])
def test_equals_xgboost_pred_contribs_with_missing_values(objective: str) -> None:
    X, y = _data(2000, 8, seed=11)
    if objective == "reg:squarederror":
        y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1])
    params = BoostParams(objective=objective, n_estimators=15, max_depth=5)
    model = train(params, X, y)
    ours = booster_contributions(model, X)
    assert ours.shape == (2000, 9)
    np.testing.assert_allclose(ours.sum(1), _margin(model, X), rtol=0, atol=1e-9)
    # XGBoost computes in float32: its values carry ~1e-7 relative rounding.
    np.testing.assert_allclose(_xgboost_contribs(model, X), ours, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_multi_class_layout_is_additive(strategy: str) -> None:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 5))
    y = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5]).astype(float)
    params = BoostParams(
        objective="multi:softmax",
        num_class=3,
        n_estimators=4,
        max_depth=3,
        multi_strategy=strategy,
    )
    model = train(params, X, y)
    ours = booster_contributions(model, X)
    assert ours.shape == (400, 3, 6)
    np.testing.assert_allclose(ours.sum(2), model.predict_margin(X), rtol=0, atol=1e-9)


def test_deep_trees_and_few_rows_take_the_per_row_path() -> None:
    """2**slots above the number of rows: weights per row, not per pattern; the same values."""
    X, y = _data(3000, 10, seed=2, missing=0.0)
    model = train(BoostParams(n_estimators=2, max_depth=9, min_child_weight=0.0), X, y)
    few = booster_contributions(model, X[:5])
    many = booster_contributions(model, X[:2000])[:5]
    np.testing.assert_allclose(few, many, rtol=0, atol=1e-12)
    np.testing.assert_allclose(few.sum(1), _margin(model, X[:5]), rtol=0, atol=1e-9)


def test_decision_bits_give_the_same_values_as_feature_values() -> None:
    """The vertical guest's input: go_left bits from bin codes instead of raw values."""
    X, y = _data(500, 6, seed=4)
    model = train(BoostParams(n_estimators=5, max_depth=4), X, y)
    data = model.mapper.transform(X)
    from_bits = ensemble_contributions(
        model.trees,
        model.tree_output,
        model.base_margin,
        lambda _i, tree: tree.local_decisions_binned(data.codes, data.missing_bin),
        lambda _i, tree: feature_players(tree),
        6,
    )
    np.testing.assert_array_equal(from_bits, booster_contributions(model, X))


def test_estimators_predict_contributions() -> None:
    X, y = _data(300, 5, seed=8)
    clf = GBDTClassifier(n_estimators=5, max_depth=3).fit(X, y)
    contribs = clf.predict(X, pred_contribs=True)
    np.testing.assert_array_equal(contribs, booster_contributions(clf.booster_, X))
    reg = GBDTRegressor(n_estimators=5, max_depth=3).fit(X, y)
    np.testing.assert_allclose(
        reg.predict(X, pred_contribs=True).sum(1), reg.predict(X), rtol=0, atol=1e-9
    )


def test_bad_inputs_are_refused() -> None:
    X, y = _data(200, 4, seed=9)
    model = train(BoostParams(n_estimators=2, max_depth=3), X, y)
    tree = model.trees[0]
    with pytest.raises(InputError, match="groups"):
        booster_contributions(model, X, groups=[0, 1, -1, 0])
    with pytest.raises(InputError, match="go_left"):
        tree_contributions(tree, np.zeros((1, 3), dtype=bool), feature_players(tree), 4)
    with pytest.raises(InputError, match="players must be in"):
        tree_contributions(tree, tree.local_decisions_raw(X), feature_players(tree), 1)


# -- reason codes ---------------------------------------------------------------------------


def test_reason_codes_rank_by_direction_and_never_argue_the_other_way() -> None:
    contribs = np.array(
        [
            [0.5, -0.2, 0.1, 0.0, -1.0],
            [-0.3, -0.1, -0.4, 0.2, 2.0],
        ]
    )
    players, values = reason_codes(contribs, 2)
    np.testing.assert_array_equal(players, [[0, 2], [3, -1]])
    np.testing.assert_array_equal(values, [[0.5, 0.1], [0.2, 0.0]])
    players, values = reason_codes(contribs, 3, direction="decrease")
    np.testing.assert_array_equal(players, [[1, -1, -1], [2, 0, 1]])
    np.testing.assert_array_equal(values, [[-0.2, 0.0, 0.0], [-0.4, -0.3, -0.1]])
    with pytest.raises(InputError, match="direction"):
        reason_codes(contribs, 1, direction="up")  # type: ignore[arg-type]


def test_horizontal_client_explains_its_model_locally() -> None:
    X, y = _data(300, 5, seed=12)
    model = train(BoostParams(n_estimators=4, max_depth=3), X, y)
    client = HomoClient()
    client.model_ = model
    np.testing.assert_array_equal(
        client.predict(X, pred_contribs=True), booster_contributions(model, X)
    )


def test_a_copy_without_covers_is_refused_not_explained_wrongly() -> None:
    """A horizontal client's copy arrives without statistics unless the server shares them:
    zero covers would turn TreeSHAP's weights into 0.5/0.5 guesses, so it is refused."""
    X, y = _data(300, 5, seed=13)
    model = train(BoostParams(n_estimators=2, max_depth=3), X, y)
    for tree in model.trees:
        tree.cover[:] = 0.0
    client = HomoClient()
    client.model_ = model
    with pytest.raises(InputError, match="no covers"):
        client.predict(X, pred_contribs=True)


def test_a_model_of_single_leaves_gives_only_the_base_value() -> None:
    X = np.ones((50, 3))
    y = np.r_[np.zeros(25), np.ones(25)]
    model = train(BoostParams(n_estimators=2, max_depth=3), X, y)
    assert all(t.n_nodes == 1 for t in model.trees)
    contribs = booster_contributions(model, X)
    np.testing.assert_array_equal(contribs[:, :3], 0.0)
    np.testing.assert_allclose(contribs[:, 3], _margin(model, X), rtol=0, atol=1e-12)
    empty = booster_contributions(model, X, n_rounds=0)
    np.testing.assert_array_equal(empty[:, 3], model.base_margin[0])
