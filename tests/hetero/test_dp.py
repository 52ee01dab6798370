"""Differentially private vertical training: the guest's mechanisms over its own and the hosts'
candidates give the core's private model on the joined data at a fixed noise seed."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

import numpy as np
import pytest

from p2pboost.exceptions import InputError, RemoteProtocolError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests._carried_rows import spy_carried_rows
from tests.hetero.conftest import Keys, assert_same_trees, federate, predict


def _params(seed: int | None = 5) -> BoostParams:
    dp = {"epsilon": 4.0, "noise_seed": seed, "trees_per_ensemble": 2}
    return BoostParams().with_updates(n_estimators=3, max_depth=3, max_bin=8, dp=dp)


@pytest.mark.slow
async def test_private_vertical_model_equals_the_cores_at_a_fixed_noise_seed(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = breast  # with missing values: both directions of every candidate count
    params = _params().with_updates(n_estimators=4)  # 2 ensembles of 2 trees
    blocks = [X[:, :8], X[:, 8:18], X[:, 18:]]
    carried = spy_carried_rows(monkeypatch)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, blocks[0], y, blocks[1:], params, pool, keys, dp_replay=True)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    by_guest = sum(carried)
    carried.clear()
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    # The guest's round loop carried rows the gradient filter left out on, as the core did.
    assert by_guest == sum(carried) > 0
    owners = {int(o) for t in fed.guest.trees for o in t.owner}
    assert {1, 2} <= owners  # the hosts' candidates took part in the draws
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    assert fed.guest.privacy == core.privacy
    # The filter's count is the guest's alone: the core's, and not in the guest's file.
    assert fed.guest.filtered_rows == core.filtered_rows
    assert fed.guest.filtered_rows is not None
    assert fed.guest.filtered_rows > 0
    assert "filtered_rows" not in fed.guest.to_dict()["privacy"]
    assert not fed.guest.diagnostics  # leaf purity is a label statistic: not in the file
    other = train(_params(6).with_updates(n_estimators=4), X, y)
    assert not np.array_equal(other.predict_margin(X), margin)


@pytest.mark.slow
async def test_private_run_without_a_seed_shuffles_and_spends_its_budget(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], _params(None), pool, keys)
    record = fed.guest.privacy
    assert record is not None
    assert record["noise"] == "os.urandom"
    assert record["epsilon"] == pytest.approx(4.0)
    assert all(not t.gain.any() for t in fed.guest.trees)


async def test_a_host_refuses_a_replayable_private_run_unless_it_allows_it(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:

        async def guest() -> object:
            async with c["a"].session("train", peers=["b"]) as s:
                return await guest_train(s, ["b"], X[:, :10], y, _params(), keys=keys)

        async def host() -> object:
            async with c["b"].session("train", peers=["a"]) as s:
                return await host_train(s, "a", X[:, 10:], executor=pool, workers=1)

        results = await asyncio.gather(guest(), host(), return_exceptions=True)
    assert isinstance(results[1], RemoteProtocolError)
    assert "dp_replay=True" in str(results[1])
    assert isinstance(results[0], BaseException)


async def test_private_vertical_refusals_come_before_any_message(
    breast: tuple[np.ndarray, np.ndarray],
) -> None:
    from typing import Any, cast

    X, y = breast
    session = cast(Any, object())  # never touched
    with pytest.raises(InputError, match="cannot resume"):
        await guest_train(session, ["b"], X, y, _params(), resume=True, checkpoint="x")
    with pytest.raises(InputError, match="sample_weight"):
        await guest_train(session, ["b"], X, y, _params(), sample_weight=np.ones(y.size))
