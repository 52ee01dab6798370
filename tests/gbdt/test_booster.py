from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.callbacks import EarlyStopping, LogEvaluation, RecordEvaluation
from p2pboost.gbdt.metrics import accuracy, auc, rmse
from p2pboost.gbdt.params import BoostParams

Data = tuple[np.ndarray, np.ndarray]
SMALL = BoostParams(n_estimators=8, max_depth=3, max_bin=16)


def test_binary_training_learns(breast: Data) -> None:
    X, y = breast
    booster = train(SMALL, X[:400], y[:400])
    assert auc(y[400:], booster.predict(X[400:])) > 0.95
    assert booster.n_rounds == 8
    assert len(booster.trees) == 8


def test_base_score_default_and_explicit(breast: Data) -> None:
    X, y = breast
    one_round = SMALL.with_updates(n_estimators=1, learning_rate=1e-9)
    default = train(one_round, X, y).predict(X)
    assert np.allclose(default, y.mean())
    explicit = train(one_round.with_updates(base_score=0.3), X, y).predict(X)
    assert np.allclose(explicit, 0.3)


def test_missing_values_train_and_predict_consistently(breast_missing: Data) -> None:
    X, y = breast_missing
    booster = train(SMALL, X, y)
    assert auc(y, booster.predict(X)) > 0.95
    data = booster.mapper.transform(X)
    assert np.array_equal(booster.predict_margin(X), booster.predict_margin_binned(data))


def test_same_seed_same_model_with_all_randomness(breast_missing: Data) -> None:
    X, y = breast_missing
    params = SMALL.with_updates(subsample=0.7, colsample_bytree=0.6, seed=3)
    a, b = train(params, X, y), train(params, X, y)
    assert a.to_dict() == b.to_dict()
    c = train(params.with_updates(seed=4), X, y)
    assert c.to_dict()["trees"] != a.to_dict()["trees"]
    goss = params.with_updates(subsample=1.0, goss=True, top_rate=0.3, other_rate=0.2)
    assert train(goss, X, y).to_dict() == train(goss, X, y).to_dict()


def test_a_goss_hook_replaces_the_cores_draw_of_rows_and_multipliers(breast: Data) -> None:
    """Without column sampling the generator serves GOSS alone, so a hook drawing from a
    generator seeded as the core's gives the core's model; the hook's draws are used."""
    from p2pboost.gbdt.sampling import goss_sample

    X, y = breast
    params = SMALL.with_updates(goss=True, top_rate=0.3, other_rate=0.2, seed=5)
    rng = np.random.default_rng(params.seed)
    seen: list[int] = []

    def same(round_: int, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append(round_)
        return goss_sample(rng, grad, params.top_rate, params.other_rate)

    own = train(params, X, y)
    assert train(params, X, y, goss_sample=same).to_dict()["trees"] == own.to_dict()["trees"]
    assert seen == list(range(params.n_estimators))

    def top_only(round_: int, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(100, dtype=np.int64), np.ones(grad.shape[0])

    other = train(params, X, y, goss_sample=top_only)
    assert other.to_dict()["trees"] != own.to_dict()["trees"]
    with pytest.raises(InputError, match="one multiplier per row"):
        train(params, X, y, goss_sample=lambda r, g: (np.arange(10), np.ones(3)))


@pytest.mark.parametrize(
    "changes",
    [{"subsample": 0.5}, {"colsample_bytree": 0.3}, {"goss": True}, {"min_samples_leaf": 20}],
    ids=str,
)
def test_sampling_and_constraints_still_learn(breast: Data, changes: dict[str, object]) -> None:
    X, y = breast
    booster = train(SMALL.with_updates(**changes), X[:400], y[:400])
    assert auc(y[400:], booster.predict(X[400:])) > 0.93


def test_column_sampling_restricts_features(breast: Data) -> None:
    X, y = breast
    booster = train(SMALL.with_updates(colsample_bytree=0.1, n_estimators=1), X, y)
    assert np.unique(booster.trees[0].feature[booster.trees[0].feature >= 0]).size <= 3


def test_min_samples_leaf_is_respected(breast: Data) -> None:
    X, y = breast
    booster = train(SMALL.with_updates(min_samples_leaf=40, n_estimators=2), X, y)
    for tree in booster.trees:
        counts = np.bincount(tree.leaves_raw(X), minlength=tree.n_nodes)
        assert counts[tree.is_leaf].min() >= 40


def test_sparse_aware_model_equals_dense_model(breast_missing: Data) -> None:
    X, y = breast_missing
    X = np.where(np.abs(X) < np.nanmedian(np.abs(X), axis=0), 0.0, X)  # many zeros
    dense = train(SMALL.with_updates(sparse_aware=False), X, y)
    sparse = train(SMALL.with_updates(sparse_aware=True), X, y)
    assert dense.to_dict()["trees"] == sparse.to_dict()["trees"]


def test_save_and_load_round_trip(breast_missing: Data, tmp_path: Path) -> None:
    X, y = breast_missing
    booster = train(SMALL, X, y)
    path = tmp_path / "model.json"
    booster.save(path)
    loaded = Booster.load(path)
    assert np.array_equal(loaded.predict(X), booster.predict(X))
    assert loaded.to_dict() == booster.to_dict()
    doc = json.loads(path.read_text())
    assert doc["format"] == "p2pboost.gbdt.booster"
    assert doc["version"] == 1


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d.update(version=99),
        lambda d: d.update(format="pickle"),
        lambda d: d["trees"][0].update(left=[5, 5, 5]),
        lambda d: d["trees"][0].update(value="x"),
        lambda d: d.update(tree_output=[7] * len(d["tree_output"])),
        lambda d: d["params"].update(max_bin=1),
        lambda d: d.update(base_margin=[0.0, 1.0]),
        lambda d: d.update(best_iteration=5),
    ],
)
def test_corrupt_models_raise_model_error(breast: Data, corrupt: object) -> None:
    X, y = breast
    doc = train(SMALL.with_updates(n_estimators=2), X, y).to_dict()
    corrupt(doc)  # type: ignore[operator]
    with pytest.raises(ModelError):
        Booster.from_dict(doc)


def test_unreadable_file_raises_model_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ModelError):
        Booster.load(path)


def test_early_stopping_stops_and_predicts_with_the_best_round() -> None:
    X, y = load_diabetes(return_X_y=True)
    record = RecordEvaluation()
    lines: list[str] = []
    booster = train(
        BoostParams(objective="reg:squarederror", n_estimators=300, max_depth=4),
        X[:300],
        y[:300],
        eval_sets=[(X[300:], y[300:])],
        eval_names=["valid"],
        callbacks=[record, LogEvaluation(period=5, printer=lines.append), EarlyStopping(5)],
    )
    history = record.history["valid"]["rmse"]
    assert booster.best_iteration is not None
    assert booster.n_rounds == booster.best_iteration + 6 < 300
    assert history[booster.best_iteration] == min(history)
    best = rmse(y[300:], booster.predict(X[300:]))
    assert best == pytest.approx(history[booster.best_iteration])
    assert lines
    assert lines[0].startswith("[4] valid-rmse:")


def test_early_stopping_needs_an_eval_set(breast: Data) -> None:
    X, y = breast
    with pytest.raises(InputError, match="evaluation set"):
        train(SMALL, X, y, callbacks=[EarlyStopping(2)])


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_multi_class_strategies(strategy: str) -> None:
    X, y = load_iris(return_X_y=True)
    params = BoostParams(
        objective="multi:softmax",
        num_class=3,
        n_estimators=6,
        max_depth=3,
        multi_strategy=strategy,
    )
    booster = train(params, X, y)
    proba = booster.predict(X)
    assert proba.shape == (150, 3)
    assert np.allclose(proba.sum(axis=1), 1.0)
    assert accuracy(y, proba) > 0.95
    if strategy == "multi_output_tree":
        assert len(booster.trees) == 6
        assert all(t.value.shape[1] == 3 for t in booster.trees)
        assert booster.tree_output == [-1] * 6
    else:
        assert len(booster.trees) == 18
        assert booster.tree_output[:3] == [0, 1, 2]


def test_multi_output_round_trip(tmp_path: Path) -> None:
    X, y = load_iris(return_X_y=True)
    params = BoostParams(
        objective="multi:softmax",
        num_class=3,
        n_estimators=3,
        multi_strategy="multi_output_tree",
    )
    booster = train(params, X, y)
    booster.save(tmp_path / "m.json")
    assert np.array_equal(Booster.load(tmp_path / "m.json").predict(X), booster.predict(X))


@pytest.mark.parametrize(
    "objective",
    ["reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror", "reg:fair", "reg:logcosh"],
)
def test_regression_objectives_beat_the_constant(objective: str) -> None:
    X, y = load_diabetes(return_X_y=True)
    y = (y - y.mean()) / y.std()
    booster = train(BoostParams(objective=objective, n_estimators=20, max_depth=3), X, y)
    assert rmse(y, booster.predict(X)) < 0.85 * rmse(y, np.full_like(y, np.median(y)))


def test_tweedie_predicts_positive_means() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3))
    y = rng.poisson(np.exp(X[:, 0]))
    booster = train(BoostParams(objective="reg:tweedie", n_estimators=20, max_depth=3), X, y)
    pred = booster.predict(X)
    assert np.all(pred > 0)
    assert np.corrcoef(pred, np.exp(X[:, 0]))[0, 1] > 0.8


def test_feature_importance(breast: Data) -> None:
    X, y = breast
    booster = train(SMALL, X, y)
    splits = booster.feature_importance("split")
    gains = booster.feature_importance("gain")
    n_internal = sum(int((t.feature >= 0).sum()) for t in booster.trees)
    assert splits.sum() == n_internal
    assert gains.sum() == pytest.approx(sum(t.gain[t.feature >= 0].sum() for t in booster.trees))
    assert np.all(gains >= 0)
    assert np.all((gains > 0) == (splits > 0))
    with pytest.raises(InputError):
        booster.feature_importance("cover")


@pytest.mark.parametrize(
    ("X", "y", "params", "match"),
    [
        (np.zeros((4, 2)), [0, 1, np.nan, 1], SMALL, "NaN"),
        (np.zeros((4, 2)), [0, 1, 1], SMALL, "rows"),
        (np.zeros(4), [0, 1, 1, 0], SMALL, "2-D"),
        (np.zeros((0, 2)), [], SMALL, "empty"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(objective="nope"), "unknown objective"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(max_bin=1), "max_bin"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(max_bin=300), "max_bin"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(reg_lambda=-1.0), "reg_lambda"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(learning_rate=0.0), "learning_rate"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(subsample=1.5), "subsample"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(n_estimators=0), "n_estimators"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(max_depth=2.5), "max_depth"),  # type: ignore[arg-type]
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(gamma=float("nan")), "gamma"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(multi_strategy="x"), "multi_strategy"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(goss=True, subsample=0.5), "GOSS"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(num_class=3), "num_class"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(sparse_aware="yes"), "sparse_aware"),
        (np.zeros((4, 2)), [0, 1, 1, 0], BoostParams(objective="softmax"), "num_class"),
    ],
)
def test_bad_input_raises_input_error(
    X: object, y: object, params: BoostParams, match: str
) -> None:
    with pytest.raises(InputError, match=match):
        train(params, X, y)


def test_predict_checks_the_feature_count(breast: Data) -> None:
    X, y = breast
    booster = train(SMALL.with_updates(n_estimators=1), X, y)
    with pytest.raises(InputError, match="features"):
        booster.predict(X[:, :5])
    with pytest.raises(InputError, match="n_rounds"):
        booster.predict(X, n_rounds=5)


def test_unknown_parameter_is_rejected() -> None:
    with pytest.raises(InputError, match="unknown parameter"):
        SMALL.with_updates(eta=0.1)


def test_gamma_and_min_child_weight_prune(breast: Data) -> None:
    X, y = breast
    free = train(SMALL.with_updates(n_estimators=1), X, y).trees[0]
    gains = free.gain[free.feature >= 0]
    # gamma at the largest gain of the free tree: the root cannot split (gain must exceed it).
    stump = train(SMALL.with_updates(n_estimators=1, gamma=float(gains.max())), X, y).trees[0]
    assert stump.n_nodes == 1
    assert stump.depth == 0
    # gamma between gains: only splits with larger gain survive.
    cut = float(np.median(gains))
    pruned = train(SMALL.with_updates(n_estimators=1, gamma=cut), X, y).trees[0]
    assert np.all(pruned.gain[pruned.feature >= 0] > cut)
    heavy = train(SMALL.with_updates(n_estimators=1, min_child_weight=30.0), X, y).trees[0]
    assert heavy.cover[heavy.is_leaf].min() >= 30.0
