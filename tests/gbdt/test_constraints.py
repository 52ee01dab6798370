"""Monotone and interaction constraints in the core: the models obey them, the pure functions
on sums are XGBoost's rules, and bad settings are refused naming their cause."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.constraints import (
    MonotoneNodes,
    allowed_features,
    child_bounds,
    clamped_weight,
    gain_given_weight,
    monotone_split_gains,
    monotone_valid,
    resolve_constraints,
)
from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor
from p2pboost.gbdt.histogram import Histogram
from p2pboost.gbdt.noise import NoiseSource
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import PrivateTree, tree_plan
from p2pboost.gbdt.split import candidate_mask
from p2pboost.gbdt.tree import Tree


def _data(seed: int, n: int = 400, n_feat: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_feat))
    X[rng.random(X.shape) < 0.05] = np.nan
    signal = X[:, 0] - 0.7 * X[:, 1] + np.sin(3 * X[:, 2]) + 0.5 * X[:, 3] * X[:, 4]
    y = (np.nan_to_num(signal) + rng.normal(scale=0.7, size=n) > 0).astype(np.float64)
    return X, y


def _violations(model: Booster, X: np.ndarray, directions: dict[int, int], seed: int) -> int:
    """Predictions that move against a direction when a constrained feature is varied over
    a grid (missing values of the other features kept), on random rows."""
    rng = np.random.default_rng(seed)
    rows = X[rng.integers(0, X.shape[0], 60)]
    bad = 0
    for f, d in directions.items():
        grid = np.linspace(np.nanmin(X[:, f]) - 1, np.nanmax(X[:, f]) + 1, 40)
        batch = np.repeat(rows, grid.size, axis=0)
        batch[:, f] = np.tile(grid, rows.shape[0])
        margin = model.predict_margin(batch)[:, 0].reshape(rows.shape[0], grid.size)
        bad += int((np.diff(margin, axis=1) * d < -1e-12).sum())
    return bad


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    directions=st.lists(st.sampled_from([-1, 0, 1]), min_size=5, max_size=5),
    depth=st.integers(2, 5),
)
def test_constrained_model_never_moves_against_a_direction(
    seed: int, directions: list[int], depth: int
) -> None:
    X, y = _data(seed)
    params = BoostParams(
        n_estimators=4, max_depth=depth, max_bin=16, monotone_constraints=tuple(directions)
    )
    model = train(params, X, y)
    wanted = {f: d for f, d in enumerate(directions) if d}
    assert _violations(model, X, wanted, seed) == 0


def test_unconstrained_model_does_move_against_them() -> None:
    """The check above can fail: without constraints the same data give violations."""
    X, y = _data(3)
    model = train(BoostParams(n_estimators=4, max_depth=5, max_bin=16), X, y)
    assert _violations(model, X, {0: -1, 1: 1, 2: 1}, 3) > 0


def test_all_zero_directions_train_the_unconstrained_model() -> None:
    X, y = _data(1)
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16)
    plain = train(params, X, y)
    zeros = train(params.with_updates(monotone_constraints=(0,) * 5), X, y)
    np.testing.assert_array_equal(plain.predict_margin(X), zeros.predict_margin(X))


def _paths(tree: Tree) -> list[set[int]]:
    """The features used on every root-to-leaf path."""
    out: list[set[int]] = []

    def walk(node: int, used: set[int]) -> None:
        if tree.is_leaf[node]:
            out.append(used)
            return
        here = used | {int(tree.feature[node])}
        walk(int(tree.left[node]), here)
        walk(int(tree.right[node]), here)

    walk(0, set())
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    assignment=st.lists(st.integers(0, 2), min_size=5, max_size=5),
)
def test_no_path_mixes_features_of_different_groups(seed: int, assignment: list[int]) -> None:
    """Features get a group (0, 1) or none (2); every path stays inside one group, and a
    feature of no group is used only on a path that uses nothing else."""
    groups = [[f for f, g in enumerate(assignment) if g == s] for s in (0, 1)]
    groups = [g for g in groups if g]
    if not groups:
        groups = [[0]]
    X, y = _data(seed)
    params = BoostParams(n_estimators=4, max_depth=4, max_bin=16).with_updates(
        interaction_constraints=groups
    )
    model = train(params, X, y)
    for tree in model.trees:
        for used in _paths(tree):
            assert len(used) <= 1 or any(used <= set(g) for g in groups), (used, groups)


def test_unconstrained_paths_do_mix_features() -> None:
    X, y = _data(2)
    model = train(BoostParams(n_estimators=4, max_depth=4, max_bin=16), X, y)
    groups = [{0, 1}, {2, 3, 4}]
    paths = [used for tree in model.trees for used in _paths(tree)]
    assert any(len(u) > 1 and not any(u <= g for g in groups) for u in paths)


def test_both_constraints_together_and_by_name_in_a_dataframe() -> None:
    X, y = _data(5)
    names = ["income", "debt", "age", "tenure", "region_score"]
    frame = pd.DataFrame(X, columns=names)
    params = BoostParams(
        n_estimators=4,
        max_depth=4,
        max_bin=16,
        monotone_constraints={"income": 1, "debt": -1},
        interaction_constraints=(("income", "debt", "age"), ("tenure", "region_score")),
    )
    by_name = train(params, frame, y)
    by_position = train(
        params.with_updates(
            monotone_constraints="(1,-1,0,0,0)", interaction_constraints="[[0, 1, 2], [3, 4]]"
        ),
        X,
        y,
    )
    np.testing.assert_array_equal(by_name.predict_margin(frame), by_position.predict_margin(X))
    assert _violations(by_position, X, {0: 1, 1: -1}, 5) == 0
    # The settings survive the model file.
    again = Booster.from_dict(by_name.to_dict())
    assert again.params == by_name.params
    assert again.params.monotone_constraints == {"income": 1, "debt": -1}


def test_estimators_take_the_constraints() -> None:
    X, y = _data(6)
    clf = GBDTClassifier(
        n_estimators=4, max_depth=4, max_bin=16, monotone_constraints=(1, -1, 0, 0, 0)
    ).fit(X, y)
    assert _violations(clf.booster_, X, {0: 1, 1: -1}, 6) == 0
    reg = GBDTRegressor(
        n_estimators=3, max_depth=3, max_bin=16, interaction_constraints=[[0, 1], [2, 3, 4]]
    ).fit(X, np.nan_to_num(X[:, 0] * X[:, 2]))
    for tree in reg.booster_.trees:
        for used in _paths(tree):
            assert len(used) <= 1 or used <= {0, 1} or used <= {2, 3, 4}
    assert clf.get_params()["monotone_constraints"] == (1, -1, 0, 0, 0)


def test_multiclass_one_tree_per_class_is_monotone_in_every_class() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=300), [-0.5, 0.5]).astype(np.float64)
    params = BoostParams(
        objective="multi:softmax",
        num_class=3,
        n_estimators=3,
        max_depth=3,
        max_bin=16,
        monotone_constraints=(1, 0, 0),
    )
    model = train(params, X, y)
    grid = np.linspace(-3, 3, 30)
    batch = np.repeat(X[:20], grid.size, axis=0)
    batch[:, 0] = np.tile(grid, 20)
    for k in range(3):  # each class's margin only rises with feature 0
        m = model.predict_margin(batch)[:, k].reshape(20, grid.size)
        assert (np.diff(m, axis=1) >= -1e-12).all()


# -- the pure functions on sums ------------------------------------------------------------------


def test_clamped_weight_and_gain_given_weight_are_xgboosts() -> None:
    G, H = np.array([-2.0, 3.0, 1.0]), np.array([3.0, 1.0, 0.5])
    w = clamped_weight(G, H, np.array(-1.0), np.array(0.4), 1.0, 1.0)
    np.testing.assert_allclose(w, [0.4, -1.0, 0.0])  # -G/(H+1) = 0.5, -1.5; H < mcw: 0
    free = clamped_weight(G, H, np.array(-np.inf), np.array(np.inf), 1.0, 0.0)
    # With the free weight, the score is G^2 / (H + lambda).
    np.testing.assert_allclose(gain_given_weight(G, H, free, 1.0), G * G / (H + 1.0))
    assert gain_given_weight(np.array(1.0), np.array(0.0), np.array(2.0), 1.0) == 0.0


def test_monotone_split_gains_mask_the_wrong_direction_only() -> None:
    # Left child wants +0.5, right child -0.5: decreasing, so +1 invalid, -1 and 0 valid.
    GL, HL = np.array([[-1.0]]), np.array([[1.0]])
    GR, HR = np.array([[1.0]]), np.array([[1.0]])
    common = (np.zeros(1), np.full(1, -np.inf), np.full(1, np.inf))
    gains = {
        d: monotone_split_gains(GL, HL, GR, HR, *common, np.array([d]), 1.0, 0.0)[0]
        for d in (-1, 0, 1)
    }
    assert gains[1] == -np.inf
    assert gains[-1] == gains[0] == pytest.approx(0.5 + 0.5)  # 1/2 + 1/2 - 0
    assert monotone_valid(np.array(1.0), np.array(1.0), np.array(1))  # ties are valid


def test_child_bounds_take_the_midpoint() -> None:
    lo, hi = np.array([-1.0, -1.0, -1.0]), np.array([1.0, 1.0, 1.0])
    d = np.array([1, -1, 0])
    left_lo, left_hi, right_lo, right_hi = child_bounds(
        lo, hi, d, np.array([-0.2, 0.6, 0.3]), np.array([0.4, 0.0, 0.1])
    )
    np.testing.assert_allclose(left_lo, [-1.0, 0.3, -1.0])
    np.testing.assert_allclose(left_hi, [0.1, 1.0, 1.0])
    np.testing.assert_allclose(right_lo, [0.1, -1.0, -1.0])
    np.testing.assert_allclose(right_hi, [1.0, 0.3, 1.0])


def test_allowed_features_follow_xgboosts_rule() -> None:
    groups = np.array([[1, 1, 0, 0, 0], [0, 1, 1, 0, 0]], dtype=bool)
    used = np.array(
        [
            [0, 0, 0, 0, 0],  # root: anything
            [1, 0, 0, 0, 0],  # feature 0: its group {0, 1}
            [0, 1, 0, 0, 0],  # feature 1: both groups
            [1, 1, 0, 0, 0],  # 0 and 1: only {0, 1}
            [0, 0, 0, 1, 0],  # feature 3, in no group: only itself
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(
        allowed_features(used, groups),
        np.array(
            [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 1, 0]],
            dtype=bool,
        ),
    )


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"monotone_constraints": (1, 2, 0)}, "must be -1, 0 or 1, not 2"),
        ({"monotone_constraints": "(1, x)"}, "is not a list of -1/0/1"),
        ({"monotone_constraints": {0: 1}}, "takes feature names"),
        ({"monotone_constraints": 1}, "must be a tuple of -1/0/1"),
        ({"monotone_constraints": (True, 0)}, "must be -1, 0 or 1"),
        ({"interaction_constraints": [[0, 1], []]}, "interaction_constraints[1] is empty"),
        ({"interaction_constraints": [0, 1]}, "interaction_constraints[0] must be a list"),
        ({"interaction_constraints": "[[0, 1"}, "is not a JSON list of lists"),
        ({"interaction_constraints": [[0, 1.5]]}, "a feature is a name or a position"),
        ({"interaction_constraints": [[-1]]}, "negative position"),
        (
            {
                "monotone_constraints": (1, 0),
                "objective": "multi:softmax",
                "num_class": 3,
                "multi_strategy": "multi_output_tree",
            },
            "vector leaf",
        ),
    ],
)
def test_bad_settings_are_refused(settings_: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=_escaped(message)):
        BoostParams().with_updates(**settings_)


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize(
    ("monotone", "groups", "names", "message"),
    [
        ((1, 0), None, None, "has 2 directions but the data have 3 features"),
        ({"income": 1}, None, ["a", "b", "c"], "unknown feature(s): income"),
        ({"a": 1}, None, None, "the features have no names"),
        (None, [[0, 5]], None, "names feature 5, but the data have 3 features"),
        (None, [["a", "zzz"]], ["a", "b", "c"], "unknown feature 'zzz'"),
        ({"c": -1}, None, ["a", "b", "c"], "categorical feature(s) c"),
    ],
)
def test_resolution_refuses_what_does_not_fit_the_data(
    monotone: Any, groups: Any, names: list[str] | None, message: str
) -> None:
    params = BoostParams(monotone_constraints=monotone, interaction_constraints=groups)
    with pytest.raises(InputError, match=_escaped(message)):
        resolve_constraints(
            params.monotone_constraints, params.interaction_constraints, 3, names, ["c"]
        )


def test_training_refuses_a_direction_on_a_categorical_column() -> None:
    frame = pd.DataFrame({"x": np.arange(40.0), "colour": pd.Categorical(["red", "blue"] * 20)})
    y = (np.arange(40) % 3 == 0).astype(np.float64)
    params = BoostParams(n_estimators=2, monotone_constraints={"colour": 1})
    with pytest.raises(InputError, match="categorical feature"):
        train(params, frame, y)


# -- differential privacy -------------------------------------------------------------------------


def _dp_params(**extra: Any) -> BoostParams:
    dp = {"epsilon": 50.0, "mechanism": "seq", "noise_seed": 3, "monotone_heuristic": True}
    return BoostParams().with_updates(n_estimators=2, max_depth=2, max_bin=8, dp=dp, **extra)


def test_private_split_draws_only_among_constrained_candidates() -> None:
    """One node, two features with the same decreasing pattern (left weights above right
    ones). Under +1 on feature 0 no real cut of feature 0 is drawn, whatever the noise (its
    only valid candidates leave every row on one side: weights 0 and 0, a tie XGBoost's test
    allows too); under +1 on both, no real cut at all. Without constraints the same noise
    does draw real cuts of feature 0."""
    params = _dp_params()
    grad = np.zeros((1, 2, 5, 1))
    grad[0, :, :4, 0] = [[-3.0, -1.0, 1.0, 3.0]] * 2  # low bins pull the weight up
    hess = np.zeros((1, 2, 5, 1))
    hess[0, :, :4, 0] = 2.0
    hist = Histogram(grad, hess, None)
    G, H = grad.sum(axis=2)[:, 0], hess.sum(axis=2)[:, 0]
    candidates = candidate_mask(np.array([4, 4]), 4)
    nodes = (np.zeros(1), np.full(1, -np.inf), np.full(1, np.inf))

    def chosen(seed: int, direction: tuple[int, int] | None) -> tuple[int, bool]:
        mech = PrivateTree(tree_plan(params, 0), 1.0, NoiseSource(seed, "mechanisms"))
        mono = None if direction is None else MonotoneNodes(*nodes, np.array(direction))
        out = mech.find_splits(hist, G, H, candidates, mono, 0.0)
        assert np.isfinite(out.gain[0])
        real = float(out.left_hess[0, 0]) not in (0.0, 8.0)
        return int(out.feature[0]), real

    seeds = range(16)
    assert not any(chosen(s, (1, 0)) == (0, True) for s in seeds)
    assert not any(chosen(s, (1, 1))[1] for s in seeds)
    assert any(chosen(s, None) == (0, True) for s in seeds)


def test_private_model_with_constraints_trains_and_keeps_its_groups() -> None:
    X, y = _data(8)
    params = _dp_params(monotone_constraints=(1, -1, 0, 0, 0), interaction_constraints=[[0, 1]])
    model = train(params, np.nan_to_num(X), y)
    assert model.privacy is not None
    for tree in model.trees:
        for used in _paths(tree):
            assert len(used) <= 1 or used <= {0, 1}


def test_dp_refuses_monotone_directions_unless_the_heuristic_is_chosen() -> None:
    """Secure default: the epsilon is not proved with directions, so dp refuses them until
    the owner opts in; zero directions and interaction groups need no opt-in."""
    dp = {"epsilon": 4.0, "mechanism": "seq"}
    base = BoostParams().with_updates(n_estimators=2, max_depth=2, max_bin=8)
    with pytest.raises(InputError, match="monotone_heuristic"):
        base.with_updates(dp=dp, monotone_constraints=(1, 0))
    with pytest.raises(InputError, match="monotone_heuristic"):
        base.with_updates(dp=dp, monotone_constraints={"a": -1})
    base.with_updates(dp=dp, monotone_constraints=(0, 0), interaction_constraints=[[0, 1]])
    opted = base.with_updates(dp={**dp, "monotone_heuristic": True}, monotone_constraints=(1, 0))
    assert opted.dp is not None
    assert opted.dp.monotone_heuristic


# -- XGBoost -------------------------------------------------------------------------------------


def test_equal_to_xgboost_when_the_bins_coincide() -> None:
    """Integer features with fewer values than max_bin: both libraries cut between the same
    values, so the constrained models agree to XGBoost's float precision."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(1)
    X = rng.integers(0, 10, size=(1500, 5)).astype(np.float64)
    signal = 0.4 * X[:, 0] - 0.3 * X[:, 1] + np.sin(X[:, 2]) + 0.1 * X[:, 3] * X[:, 4] - 2
    y = (signal + rng.logistic(size=1500) > 0).astype(np.float64)
    mono, groups = (1, -1, 0, 1, 0), ((0, 1, 2), (3, 4))
    params = BoostParams(
        n_estimators=8,
        max_depth=3,
        max_bin=16,
        base_score=0.5,
        monotone_constraints=mono,
        interaction_constraints=groups,
    )
    ours = train(params, X, y).predict_margin(X)[:, 0]
    theirs = xgb.XGBClassifier(
        n_estimators=8,
        max_depth=3,
        max_bin=16,
        tree_method="hist",
        learning_rate=0.3,
        base_score=0.5,
        monotone_constraints="(1,-1,0,1,0)",
        interaction_constraints=str([list(g) for g in groups]),
    ).fit(X, y)
    np.testing.assert_allclose(ours, theirs.predict(X, output_margin=True), atol=1e-5)


def test_auc_close_to_xgboost_on_breast_cancer(breast: tuple[np.ndarray, np.ndarray]) -> None:
    """Different bins, so different trees; the held-out AUC stays close."""
    xgb = pytest.importorskip("xgboost")
    from sklearn.metrics import roc_auc_score

    X, y = breast
    order = np.random.default_rng(0).permutation(y.size)
    train_rows, test_rows = order[:400], order[400:]
    mono = [0] * 30
    for f in (0, 1, 2, 7, 20, 27):  # size and concavity: lower odds of a benign tumour
        mono[f] = -1
    params = BoostParams(n_estimators=20, max_depth=4, max_bin=32, monotone_constraints=tuple(mono))
    ours = train(params, X[train_rows], y[train_rows]).predict(X[test_rows])
    theirs = xgb.XGBClassifier(
        n_estimators=20,
        max_depth=4,
        max_bin=32,
        tree_method="hist",
        learning_rate=0.3,
        monotone_constraints="(" + ",".join(map(str, mono)) + ")",
    ).fit(X[train_rows], y[train_rows])
    auc = roc_auc_score(y[test_rows], ours)
    xgb_auc = roc_auc_score(y[test_rows], theirs.predict_proba(X[test_rows])[:, 1])
    assert abs(auc - xgb_auc) < 0.005, (auc, xgb_auc)


@pytest.mark.parametrize(
    "extra",
    [
        {"objective": "multi:softmax", "num_class": 3, "multi_strategy": "multi_output_tree"},
        {"colsample_bynode": 0.6, "colsample_bylevel": 0.8},
        {"min_samples_leaf": 5, "subsample": 0.8},
    ],
)
def test_interaction_groups_hold_with_vector_leaves_and_sampling(extra: dict[str, Any]) -> None:
    X, y = _data(9)
    if "num_class" in extra:
        y = (np.nan_to_num(X[:, 0]) > 0).astype(np.float64) + (np.nan_to_num(X[:, 3]) > 0.5)
    params = BoostParams().with_updates(
        n_estimators=3,
        max_depth=4,
        max_bin=16,
        monotone_constraints=None if "num_class" in extra else (1, 0, 0, 0, 0),
        interaction_constraints=[[0, 1, 2], [3, 4]],
        **extra,
    )
    model = train(params, X, y)
    assert any(len(u) > 1 for tree in model.trees for u in _paths(tree))
    for tree in model.trees:
        for used in _paths(tree):
            assert len(used) <= 1 or used <= {0, 1, 2} or used <= {3, 4}


def test_a_grower_given_no_constraint_state_refuses_constrained_parameters() -> None:
    """A trainer that does not apply the constraints must not drop them silently."""
    from p2pboost.gbdt.grower import HistogramGrower

    def thresholds(features: np.ndarray, bins: np.ndarray) -> np.ndarray:
        return np.zeros(features.size)

    params = BoostParams(monotone_constraints=(1, 0))
    with pytest.raises(InputError, match="does not apply monotone_constraints"):
        HistogramGrower(params, 1, candidate_mask(np.array([4, 4]), 4), thresholds)
    # All-zero directions constrain nothing: accepted.
    zeros = BoostParams(monotone_constraints=(0, 0))
    HistogramGrower(zeros, 1, candidate_mask(np.array([4, 4]), 4), thresholds)
