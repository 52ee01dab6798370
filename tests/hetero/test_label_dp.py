"""Label differential privacy (``HeteroConfig.label_dp_epsilon``): noise on every round's
gradients at the guest, calibrated to the labels' sensitivity; the federated trees equal the
core's grown on the same noisy gradients; the accountant's record is in the model and shown
by ``p2pboost inspect``."""

from __future__ import annotations

import math
from concurrent.futures import Executor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from p2pboost.app.model_info import describe, format_description
from p2pboost.exceptions import InputError
from p2pboost.gbdt import booster
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import Margins
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.model import GuestModel
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.label_dp import (
    BASE_SHARE,
    LabelNoise,
    NoisyMargins,
    check_label_dp_run,
    label_noise,
)
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees, federate

LOGISTIC = get_objective(BoostParams())


def test_epsilon_and_seed_are_validated_and_off_by_default() -> None:
    assert HeteroConfig().label_dp_epsilon is None
    assert HeteroConfig(label_dp_epsilon=0).label_dp_epsilon == 0  # 0: off
    for bad in (-1.0, math.inf, math.nan, True, "1"):
        with pytest.raises(InputError, match="label_dp_epsilon") as err:
            HeteroConfig(label_dp_epsilon=bad)  # type: ignore[arg-type]
        assert repr(bad) in str(err.value)  # the bad value is named
    for seed in (-1, 1.5, True):
        with pytest.raises(InputError, match="label_dp_noise_seed"):
            HeteroConfig(label_dp_epsilon=1.0, label_dp_noise_seed=seed)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="set label_dp_epsilon"):
        HeteroConfig(label_dp_noise_seed=3)
    assert label_noise(HeteroConfig(), BoostParams(), LOGISTIC, None) is None


def test_refused_combinations_name_the_setting() -> None:
    config = HeteroConfig(label_dp_epsilon=2.0)
    plain = BoostParams()
    check_label_dp_run(config, plain, LOGISTIC, warm=False, resume=False)  # allowed
    check_label_dp_run(
        HeteroConfig(), plain.with_updates(dp={"epsilon": 1.0}), LOGISTIC, True, True
    )
    cases = [
        (plain.with_updates(dp={"epsilon": 1.0}), LOGISTIC, False, False, "dp"),
        (
            plain,
            get_objective(BoostParams(objective="reg:squarederror")),
            False,
            False,
            "unbounded",
        ),
        (plain, get_objective(BoostParams(objective="reg:absoluteerror")), False, False, "refit"),
        (plain, LOGISTIC, True, False, "init_model"),
        (plain, LOGISTIC, False, True, "resume"),
    ]
    for params, objective, warm, resume, why in cases:
        with pytest.raises(InputError, match="label_dp_epsilon") as err:
            check_label_dp_run(config, params, objective, warm, resume)
        assert why in str(err.value)


def test_noise_is_applied_to_gradients_only() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.3).astype(np.float64)
    base = np.zeros(1)
    plain = Margins(LOGISTIC, y, base, [], [], 0.3)
    noise = LabelNoise(4.0, 5, LOGISTIC, None, seed=1, base_public=True)
    noisy = NoisyMargins(noise, LOGISTIC, y, base, [], [], 0.3)
    g0, h0 = plain.gradients()
    g1, h1 = noisy.gradients()
    assert not np.array_equal(g0, g1)
    assert np.abs(g1 - g0).max() > 1.0  # scale 5 / 4: far beyond the gradients' own range
    np.testing.assert_array_equal(h0, h1)  # the logistic hessian does not depend on the label
    assert noise.rounds_noised == 1
    # Seeded: the same noise again; unseeded: os.urandom's.
    again = NoisyMargins(
        LabelNoise(4.0, 5, LOGISTIC, None, 1, True), LOGISTIC, y, base, [], [], 0.3
    )
    np.testing.assert_array_equal(again.gradients()[0], g1)
    fresh = NoisyMargins(
        LabelNoise(4.0, 5, LOGISTIC, None, None, True), LOGISTIC, y, base, [], [], 0.3
    )
    assert not np.array_equal(fresh.gradients()[0], g1)
    for _ in range(4):
        noisy.gradients()
    with pytest.raises(InputError, match="rounds"):  # the budget was split over 5 rounds
        noisy.gradients()


@pytest.mark.parametrize(("objective", "l1"), [("binary:logistic", 1.0), ("multi:softmax", 2.0)])
def test_noise_scale_matches_the_calibration(objective: str, l1: float) -> None:
    params = BoostParams(objective=objective, num_class=3 if objective == "multi:softmax" else 0)
    obj = get_objective(params)
    eps, rounds = 2.0, 4
    weight = np.full(20000, 1.5)
    noise = LabelNoise(eps, rounds, obj, weight, seed=7, base_public=True)
    b = l1 * 1.5 * rounds / eps  # sensitivity (weight 1.5) / epsilon per round
    assert noise.scale == pytest.approx(b)
    k = obj.n_outputs
    drawn = noise(np.zeros((20000, k))).ravel()
    lam = 2.0 ** math.ceil(math.log2(b / (l1 * 1.5)))  # the snapping grid, in units
    assert np.all(
        np.isclose(np.mod(drawn / (l1 * 1.5), lam), 0)
        | np.isclose(np.mod(drawn / (l1 * 1.5), lam), lam)
    )
    # Laplace of scale b, rounded to the grid: variance 2 b^2 + (Lambda unit)^2 / 12.
    expected = math.sqrt(2 * b**2 + (lam * l1 * 1.5) ** 2 / 12)
    assert np.std(drawn) == pytest.approx(expected, rel=0.05)
    assert abs(np.mean(drawn)) < 0.05 * b
    # The tail: |snapped| > 3 b exactly when |Laplace| passes the grid's next midpoint.
    grid = lam * l1 * 1.5
    edge = (math.floor(3 * b / grid) + 0.5) * grid
    assert np.mean(np.abs(drawn) > 3 * b) == pytest.approx(math.exp(-edge / b), abs=0.006)
    # Without base_score a share of the budget goes to the base margin's noisy counts.
    split = LabelNoise(eps, rounds, obj, None, seed=7, base_public=False)
    assert split.epsilon_round == pytest.approx(eps * (1 - BASE_SHARE) / rounds)


def test_noisy_base_margin_is_close_to_the_labels_mean() -> None:
    y = (np.random.default_rng(1).random(5000) < 0.2).astype(np.float64)
    noise = LabelNoise(1.0, 10, LOGISTIC, None, seed=3, base_public=False)
    base = noise.base_margin(y)
    assert base.shape == (1,)
    assert base[0] == pytest.approx(LOGISTIC.init_margin(y)[0], abs=0.05)
    assert base[0] != LOGISTIC.init_margin(y)[0]
    for _ in range(10):
        noise(np.zeros((y.size, 1)))
    record = noise.record()
    assert record["epsilon"] == pytest.approx(1.0, rel=1e-9)  # the whole budget, spent
    assert record["rounds"] == 10
    assert record["noise"].startswith("seeded")


async def test_federated_trees_equal_the_core_on_the_same_noisy_gradients(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    X, y = breast
    X, y = X[:300], y[:300]
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16, learning_rate=0.3)
    config = replace(CONFIG, label_dp_epsilon=8.0, label_dp_noise_seed=11, purity_bound=0.2)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys, config=config)
    # The core, driven by the same mechanism and seed (its gradients and its base margin).
    noise = LabelNoise(8.0, 3, LOGISTIC, None, seed=11, base_public=False)
    plain = train(params, X, y)
    monkeypatch.setattr(booster, "initial_margin", lambda obj, p, labels: noise.base_margin(labels))
    monkeypatch.setattr(booster, "Margins", partial(NoisyMargins, noise))
    # The purity gate reads the noisy gradients (post-processing): the core gets its rounds.
    k = int(fed.guest.diagnostics["purity_guest_only_rounds"])
    assert k >= 1
    guest_mask = np.arange(X.shape[1]) < 10
    core = train(params, X, y, features_by_round=lambda r: guest_mask if r < k else None)
    np.testing.assert_array_equal(fed.guest.base_margin, core.base_margin)
    assert fed.guest.params.n_estimators == 3
    assert_same_trees(fed.joined(), core)
    assert any(
        not np.array_equal(a.value, b.value) for a, b in zip(core.trees, plain.trees, strict=True)
    )
    # The accountant's record: in the model, in its file, and in what inspect shows.
    record = fed.guest.label_privacy
    assert record is not None
    assert record["epsilon"] == pytest.approx(8.0, rel=1e-9)
    assert record["rounds"] == 3
    assert fed.guest.privacy is None
    path = tmp_path / "guest.json"
    fed.guest.save(path)
    assert GuestModel.load(path).label_privacy == record
    shown = describe(path)
    assert shown["label_privacy"] == record
    assert "epsilon = 8 label differential privacy towards the hosts" in format_description(shown)


async def test_multiclass_federation_equals_the_core_on_the_same_noisy_gradients(
    pool: Executor, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(240, 6))
    y = np.argmax(X[:, :3] + X[:, 3:] + 0.3 * rng.normal(size=(240, 3)), axis=1).astype(float)
    params = BoostParams(
        objective="multi:softmax", num_class=3, n_estimators=2, max_depth=2, max_bin=8
    )
    config = replace(CONFIG, label_dp_epsilon=6.0, label_dp_noise_seed=2)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :3], y, [X[:, 3:]], params, pool, keys, config=config)
    noise = LabelNoise(6.0, 2, get_objective(params), None, seed=2, base_public=False)
    monkeypatch.setattr(booster, "initial_margin", lambda obj, p, labels: noise.base_margin(labels))
    monkeypatch.setattr(booster, "Margins", partial(NoisyMargins, noise))
    core = train(params, X, y)
    assert len(core.trees) == 6  # one tree per class per round
    np.testing.assert_array_equal(fed.guest.base_margin, core.base_margin)
    assert_same_trees(fed.joined(), core)
    record = fed.guest.label_privacy
    assert record is not None
    assert record["sensitivity_l1"] == 2.0


async def test_refusals_come_before_any_message(breast: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = breast
    session = cast(Any, object())  # never touched
    config = replace(CONFIG, label_dp_epsilon=1.0)
    private = BoostParams(n_estimators=2, max_depth=2).with_updates(dp={"epsilon": 1.0})
    with pytest.raises(InputError, match="label_dp_epsilon with dp"):
        await guest_train(session, ["b"], X[:, :10], y, private, config=config)
    squared = BoostParams(n_estimators=2, objective="reg:squarederror")
    with pytest.raises(InputError, match="label_dp_epsilon needs an objective"):
        await guest_train(session, ["b"], X[:, :10], y, squared, config=config)
    with pytest.raises(InputError, match="label_dp_epsilon cannot resume"):
        await guest_train(
            session, ["b"], X[:, :10], y, BoostParams(), config=config, resume=True, checkpoint="x"
        )
