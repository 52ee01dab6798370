"""Links that fail during training: a host that comes back changes nothing; one that stays
away ends training on every side with an error naming it, and nothing hangs."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import replace

import numpy as np
import pytest

from p2pboost.exceptions import PeerDisconnected
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.training.common import GuestPhase, Progress
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, MemoryFabric, local_federation, wait_until
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees, federate

PARAMS = BoostParams(n_estimators=3, max_depth=3, max_bin=16)


def _mid_tree(progress: Progress) -> bool:
    return progress.tree == 1 and progress.phase is GuestPhase.SPLITS and progress.depth >= 1


@pytest.mark.slow
async def test_a_host_that_drops_mid_tree_and_returns_changes_nothing(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    progress = Progress(GuestPhase.SETUP)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        training = asyncio.ensure_future(
            federate(c, X[:, :10], y, [X[:, 10:]], PARAMS, pool, keys, progress=progress)
        )
        await wait_until(lambda: _mid_tree(progress), within=60)
        assert c.transports["b"].kill_all() > 0  # everything in flight is lost
        fed = await training
        assert c["b"].stats().peers["a"].connections >= 2  # it did reconnect
    assert_same_trees(fed.joined(), train(PARAMS, X, y))


@pytest.mark.slow
async def test_a_host_that_stays_away_fails_training_naming_it(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    progress = Progress(GuestPhase.SETUP)
    fabric = MemoryFabric()
    config = replace(TRAINING, reconnect_timeout=1.5)
    async with local_federation(fabric, ["a", "b"], config) as c:

        async def guest() -> None:
            async with c["a"].session("train", peers=["b"]) as s:
                await guest_train(
                    s,
                    ["b"],
                    X[:, :10],
                    y,
                    PARAMS,
                    config=CONFIG,
                    executor=pool,
                    keys=keys,
                    progress=progress,
                )

        async def host() -> None:
            async with c["b"].session("train", peers=["a"]) as s:
                await host_train(s, "a", X[:, 10:], executor=pool, workers=2)

        g, h = asyncio.ensure_future(guest()), asyncio.ensure_future(host())
        await wait_until(lambda: progress.tree == 0 and progress.phase is GuestPhase.SPLITS, 60)
        fabric.network.refuse(c["b"].address or "")  # the guest dials b: b is unreachable
        c.transports["b"].kill_all()
        async with asyncio.timeout(30):  # no hang: both sides end on their own
            results = await asyncio.gather(g, h, return_exceptions=True)
    guest_error, host_error = results
    assert isinstance(guest_error, PeerDisconnected)
    assert guest_error.peer == "b"
    assert "'b'" in str(guest_error)
    assert isinstance(host_error, PeerDisconnected)
    assert host_error.peer == "a"
