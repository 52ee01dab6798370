"""Homo training over the in-memory network: the model equals the core's on the union."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.metrics import logloss
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import bundled, run_homo, same_trees


async def test_binary_trees_identical_to_core_on_union(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    params = BoostParams(n_estimators=4, max_depth=4, max_bin=16)
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    core = train(params, X, y)
    np.testing.assert_array_equal(run.result.booster.mapper.edges[0], core.mapper.edges[0])
    assert same_trees(run.result.booster, core)
    for model in run.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, core)
        np.testing.assert_array_equal(model.predict(X), core.predict(X))


async def test_warm_start_three_and_three_rounds_are_six_in_one_go(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """The server continues its model file: bins, base margin, trees and column draws carry
    on, and the clients add its trees to their margins before the first new one."""
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16, colsample_bytree=0.7, seed=4)
    await _three_and_three(params, breast, federation)


async def test_warm_start_with_row_sampling_is_one_go_too(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """Each round's row-sample seed is a function of the round: a warm start's rounds draw
    what the same rounds of one longer run draw (the core is given those draws)."""
    from p2pboost.homo._sampling import client_sample, round_seed

    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16, subsample=0.7, seed=4)
    parts = {"c1": breast[0], "c2": breast[1]}

    def draws(round_: int, n_rows: int) -> np.ndarray:
        seed = round_seed(params, round_)
        sizes = [p[1].size for p in parts.values()]
        offsets = np.cumsum([0, *sizes[:-1]])
        rows = [
            client_sample(seed, c, n, params.subsample) for c, n in zip(parts, sizes, strict=True)
        ]
        return np.concatenate([r + o for r, o in zip(rows, offsets, strict=True) if r is not None])

    await _three_and_three(params, breast, federation, row_sample=draws)


async def _three_and_three(
    params: BoostParams,
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    **core_hooks: object,
) -> None:
    parts = {"c1": breast[0], "c2": breast[1]}
    config = HomoConfig(allow_two_clients=True, params=params, round_timeout=20)
    first = await run_homo(parts, config, federation)
    assert isinstance(first.result, HomoResult), first.result
    assert first.result.booster.rng_state is not None
    more = await run_homo(parts, config, federation, init_model=first.result.booster)
    assert isinstance(more.result, HomoResult), more.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    core = train(params.with_updates(n_estimators=6), X, y, **core_hooks)  # type: ignore[arg-type]
    assert len(more.result.booster.trees) == 6
    assert same_trees(more.result.booster, core)
    for model in more.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, core)


async def test_sample_weights_stay_with_each_client_and_give_the_cores_trees(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16, min_child_weight=2.0)
    parts = {"c1": breast[0], "c2": breast[1]}
    rng = np.random.default_rng(7)
    weights = {c: rng.uniform(0.0, 3.0, size=len(p[1])) for c, p in parts.items()}
    run = await run_homo(
        parts,
        HomoConfig(allow_two_clients=True, params=params, round_timeout=20),
        federation,
        weights=weights,
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    w = np.concatenate([weights[c] for c in parts])
    core = train(params, X, y, sample_weight=w)
    assert same_trees(run.result.booster, core)
    assert not same_trees(run.result.booster, train(params, X, y))  # the weights counted


@pytest.mark.parametrize(
    ("files", "params"),
    [
        (
            "wine",
            BoostParams(objective="multi:softmax", num_class=3, n_estimators=2, max_depth=3),
        ),
        (
            "wine",
            BoostParams(
                objective="multi:softmax",
                num_class=3,
                n_estimators=2,
                max_depth=3,
                multi_strategy="multi_output_tree",
            ),
        ),
        ("diabetes", BoostParams(objective="reg:squarederror", n_estimators=3, max_depth=3)),
        ("diabetes", BoostParams(objective="l2", n_estimators=2, max_depth=3)),  # an alias
        ("diabetes", BoostParams(objective="reg:tweedie", n_estimators=3, max_depth=3)),
        (
            "diabetes",
            BoostParams(
                objective="reg:pseudohubererror",
                huber_delta=20.0,
                base_score=150.0,
                n_estimators=3,
                max_depth=3,
            ),
        ),
        (
            "diabetes",
            BoostParams(objective="reg:logcosh", base_score=150.0, n_estimators=3, max_depth=3),
        ),
        (
            "diabetes",
            BoostParams(
                objective="reg:fair", fair_c=10.0, base_score=150.0, n_estimators=3, max_depth=3
            ),
        ),
    ],
    ids=[
        "softmax",
        "softmax-vector-leaves",
        "regression",
        "regression-alias",
        "tweedie",
        "pseudo-huber",
        "log-cosh",
        "fair",
    ],
)
async def test_multiclass_and_regression_identical_to_core(
    files: str, params: BoostParams, federation: Path
) -> None:
    parts, _ = bundled(files)
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    core = train(params, X, y)
    assert same_trees(run.result.booster, core)
    for model in run.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, core)


@pytest.mark.parametrize("metric", ["auc", "ks", "gini"])
async def test_rank_metrics_from_aggregated_score_histograms(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path, metric: str
) -> None:
    """AUC, KS and Gini of the union's validation rows, from summed score histograms: within
    the documented bound of the exact values (rows sharing a 1/4096 bin are ties)."""
    from p2pboost.gbdt.metrics import get_metric

    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16)
    _, test = bundled("breast")
    parts = {"c1": breast[0], "c2": breast[1]}
    evals = {"c1": (test[0][::2], test[1][::2]), "c2": (test[0][1::2], test[1][1::2])}
    config = HomoConfig(allow_two_clients=True, params=params, round_timeout=20, eval_metric=metric)
    run = await run_homo(parts, config, federation, eval_sets=evals)
    assert isinstance(run.result, HomoResult), run.result
    booster = run.result.booster
    Xv = np.vstack([e[0] for e in evals.values()])
    yv = np.concatenate([e[1] for e in evals.values()])
    exact = [get_metric(metric)(yv, booster.predict(Xv, n_rounds=i + 1)) for i in range(3)]
    assert run.result.evaluation == pytest.approx(exact, abs=5e-3)
    assert booster.history == {"valid": {metric: run.result.evaluation}}


async def test_validation_on_aggregated_metric_and_early_stopping(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    params = BoostParams(n_estimators=40, max_depth=4, learning_rate=0.8, max_bin=16)
    _, test = bundled("breast")
    parts = {"c1": breast[0], "c2": breast[1]}
    # Each client validates on its own half of the test rows.
    evals = {"c1": (test[0][::2], test[1][::2]), "c2": (test[0][1::2], test[1][1::2])}
    config = HomoConfig(
        allow_two_clients=True, params=params, round_timeout=20, early_stopping_rounds=3
    )
    run = await run_homo(parts, config, federation, eval_sets=evals)
    assert isinstance(run.result, HomoResult), run.result
    booster = run.result.booster
    scores = run.result.evaluation
    assert booster.best_iteration is not None
    assert len(scores) == booster.n_rounds < params.n_estimators
    assert booster.best_iteration == int(np.argmin(scores))
    assert len(scores) - 1 - booster.best_iteration == 3
    # The model keeps the history (saved with it: `p2pboost report` draws it).
    assert booster.history == {"valid": {"logloss": scores}}
    assert Booster.from_dict(booster.to_dict()).history == booster.history
    # The aggregated metric is the metric on the union of the validation rows.
    Xv = np.vstack([e[0] for e in evals.values()])
    yv = np.concatenate([e[1] for e in evals.values()])
    for i in (0, len(scores) - 1):
        want = logloss(yv, booster.predict(Xv, n_rounds=i + 1))
        assert scores[i] == pytest.approx(want, abs=1e-6)
    for model in run.models.values():
        assert isinstance(model, Booster)
        assert model.best_iteration == booster.best_iteration
        assert model.history == booster.history  # every party's model file keeps it


async def test_each_client_samples_its_own_rows_and_the_core_given_them_agrees(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    from p2pboost.homo._sampling import client_sample, round_seed, union_draws

    params = BoostParams(n_estimators=4, max_depth=3, max_bin=16, subsample=0.6, seed=3)
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    per_round = [round_seed(params, r) for r in range(params.n_estimators)]

    def draws(round_: int, n_rows: int) -> np.ndarray:
        rows, offset = [], 0
        for c, (_, yc) in parts.items():
            sample = client_sample(per_round[round_], c, yc.size, params.subsample)
            assert sample is not None
            rows.append(sample + offset)
            offset += yc.size
        return np.concatenate(rows)

    core = train(params, X, y, row_sample=draws)
    assert same_trees(run.result.booster, core)
    union = union_draws(params, [(c, p[1].size) for c, p in parts.items()])  # the same draws
    assert same_trees(train(params, X, y, row_sample=union.row_sample), core)
    for model in run.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, core)
    # The sample mattered: all rows give other trees.
    assert not same_trees(core, train(params.with_updates(subsample=1.0), X, y))


async def test_level_and_node_column_draws_are_the_cores(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    params = BoostParams(
        n_estimators=3,
        max_depth=3,
        max_bin=16,
        colsample_bytree=0.8,
        colsample_bylevel=0.5,
        colsample_bynode=0.5,
    )
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    core = train(params, X, y)
    assert same_trees(run.result.booster, core)
    assert not same_trees(core, train(params.with_updates(colsample_bynode=1.0), X, y))
