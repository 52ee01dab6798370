"""Federated training grows exactly the plaintext core's trees on the joined data."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pytest

from p2pboost.gbdt.booster import train
from p2pboost.gbdt.callbacks import EarlyStopping
from p2pboost.gbdt.params import BoostParams
from p2pboost.testing import TRAINING, LocalFederation, MemoryFabric, local_federation, time_factor
from tests.hetero.conftest import Keys, assert_same_trees, federate, predict


async def _ping_while(c: LocalFederation, task: asyncio.Future[Any]) -> list[float]:
    """Round trips of a small message on another session until ``task`` is done."""
    rtts: list[float] = []
    async with c["a"].session("ping", peers=["b"]) as sa, c["b"].session("ping", peers=["a"]) as sb:
        ping, pong = sa.channel("b"), sb.channel("a")
        while not task.done():
            t0 = time.perf_counter()
            await ping.send(len(rtts))
            await pong.send(await pong.recv())
            assert await ping.recv() == len(rtts)
            rtts.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
    return rtts


@pytest.mark.slow
async def test_binary_with_missing_values_one_host(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        training = asyncio.ensure_future(federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys))
        # Another session of the same nodes keeps flowing while they train.
        rtts = await _ping_while(c, training)
        fed = await training
        margin = await predict(c, fed, X[:, :10], [X[:, 10:]])
    assert len(rtts) >= 10
    assert max(rtts) < 2.0 * time_factor()  # heart-beats (every 0.2 s) would flow as well
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    assert any((t.owner == 1).any() and (t.owner == 0).any() for t in fed.guest.trees)
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    np.testing.assert_array_equal(fed.guest.transform(margin), core.predict(X))


@pytest.mark.slow
async def test_multiclass_with_two_hosts(plain_pool: Executor, keys: Keys) -> None:
    """One tree per class per round; host ``b`` and host ``c`` each hold a block of columns.

    With an ordinary process pool, each host keeps its shards in pinned workers of its own.
    """
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    params = BoostParams(objective="multi:softmax", num_class=3, n_estimators=2, max_depth=3)
    blocks = [X[:, :4], X[:, 4:9], X[:, 9:]]
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, blocks[0], y, blocks[1:], params, plain_pool, keys)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    core = train(params, X, y)
    assert len(fed.guest.trees) == 6
    assert_same_trees(fed.joined(), core)
    owners = {int(o) for t in fed.guest.trees for o in t.owner}
    assert {0, 1, 2} <= owners  # every party won splits
    np.testing.assert_array_equal(margin, core.predict_margin(X))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "extra"),
    [
        ("reg:squarederror", {"subsample": 0.7, "colsample_bytree": 0.7, "min_samples_leaf": 5}),
        ("reg:absoluteerror", {"goss": True, "gamma": 0.5}),
        ("reg:pseudohubererror", {"min_child_weight": 3.0, "reg_lambda": 0.0}),
    ],
)
async def test_regression_objectives_and_sampling(
    objective: str, extra: dict[str, object], pool: Executor, keys: Keys
) -> None:
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = X.copy()
    X[np.random.default_rng(3).random(X.shape) < 0.05] = np.nan
    y = y / 100.0
    params = BoostParams(objective=objective, n_estimators=3, max_depth=3, seed=7, **extra)  # type: ignore[arg-type]
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :4], y, [X[:, 4:]], params, pool, keys)
        margin = await predict(c, fed, X[:, :4], [X[:, 4:]])
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    np.testing.assert_array_equal(margin, core.predict_margin(X))


@pytest.mark.slow
async def test_sparse_host_features_with_column_sampling(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    """Host features that are mostly zero take the host's sparse path (the common bin derived
    from the node total) and column sampling skips unsampled features: same trees."""
    X, y = breast
    X = X.copy()
    X[:, 10:][np.random.default_rng(5).random((X.shape[0], X.shape[1] - 10)) < 0.85] = 0.0
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16, colsample_bytree=0.6, seed=3)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys)
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    assert any((t.owner == 1).any() for t in fed.guest.trees)


@pytest.mark.slow
async def test_validation_set_and_early_stopping(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    tr, va = np.arange(0, 300), np.arange(300, X.shape[0])
    params = BoostParams(n_estimators=12, max_depth=3, learning_rate=0.5, max_bin=16)
    stop = EarlyStopping(1, metric="logloss")
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(
            c,
            X[tr, :10],
            y[tr],
            [X[tr, 10:]],
            params,
            pool,
            keys,
            eval_guest=[(X[va, :10], y[va])],
            eval_hosts=[[X[va, 10:]]],
            callbacks=[stop],
        )
    core = train(
        params,
        X[tr],
        y[tr],
        eval_sets=[(X[va], y[va])],
        callbacks=[EarlyStopping(1, metric="logloss")],
    )
    assert core.best_iteration is not None  # the setting does stop early
    assert fed.guest.best_iteration == core.best_iteration
    assert_same_trees(fed.joined(), core)


async def test_sample_weights_stay_with_the_guest_and_give_the_cores_trees(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    weight = np.random.default_rng(3).uniform(0.0, 3.0, size=y.size)
    weight[:40] = 0.0  # rows that do not count at all
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16, min_child_weight=2.0)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys, sample_weight=weight)
    core = train(params, X, y, sample_weight=weight)
    assert_same_trees(fed.joined(), core)
    unweighted = train(params, X, y)
    assert any(  # the weights changed the trees: the comparison above can fail
        not np.array_equal(a.value, b.value)
        for a, b in zip(core.trees, unweighted.trees, strict=True)
    )


@pytest.mark.slow
async def test_complete_secure_first_rounds_are_the_guests_alone(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first rounds split on guest features only and the hosts take no part in them (a
    host that expected gradients for them would wait for ever: the run would not end), and
    the trees are the core's under the same restriction."""
    from dataclasses import replace

    from p2pboost.hetero._messages import TreeStart
    from p2pboost.hetero.training import host_tree as _host
    from p2pboost.hetero.training.modes import guest_only_rounds
    from tests.hetero.conftest import CONFIG

    received: list[object] = []  # every message the host's protocol takes in, in order
    real_recv = _host.recv  # type: ignore[attr-defined]

    async def recording_recv(channel: Any, expected: Any) -> Any:
        msg = await real_recv(channel, expected)
        received.append(msg)
        return msg

    monkeypatch.setattr(_host, "recv", recording_recv)
    X, y = breast
    params = BoostParams(n_estimators=4, max_depth=3, max_bin=16, colsample_bytree=0.9)
    config = replace(CONFIG, complete_secure=2)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys, config=config)
    starts = [i for i, m in enumerate(received) if isinstance(m, TreeStart)]
    assert [received[i].tree for i in starts] == [0, 1, 2, 3]  # type: ignore[attr-defined]
    # Trees 0 and 1: their start (no feature of the host's) and nothing else.
    assert starts[:3] == [starts[0], starts[0] + 1, starts[0] + 2]
    assert not received[starts[0]].features.any()  # type: ignore[attr-defined]
    assert len(received) > starts[2] + 1  # tree 2 brings the host gradients and layers
    core = train(params, X, y, features_by_round=guest_only_rounds(2, 10, X.shape[1]))
    assert_same_trees(fed.joined(), core)
    assert all((t.owner <= 0).all() for t in fed.guest.trees[:2])  # the guest's alone
    assert any((t.owner == 1).any() for t in fed.guest.trees[2:])  # then the host's too
    assert not any(s.tree < 2 for s in fed.hosts[0].splits)
    # What a host could infer from the first instance spaces: the guest's diagnostics.
    d = fed.guest.diagnostics
    assert 0.5 < d["leaf_purity_first_shared_tree"] <= 1.0
    assert 0.5 < d["leaf_purity_first_tree"] <= 1.0
    assert d["leaf_purity_first_tree"] != d["leaf_purity_first_shared_tree"]
    # Without complete_secure the first trees use the host (the comparison can fail).
    plain = train(params, X, y)
    assert any(t.feature[t.feature >= 0].max() >= 10 for t in plain.trees[:2])
