"""Warm start of vertical training: a model trained for 3 rounds and continued for 3 more has
the trees of 6 in one go, as in the core (sampling included: the generator state is carried
in the guest's model)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import replace

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, LocalFederation, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Federated, Keys, assert_same_trees

PARAMS = BoostParams(
    n_estimators=3, max_depth=3, max_bin=16, subsample=0.8, colsample_bytree=0.8, seed=5
)
SPLIT = 10


async def _train(
    c: LocalFederation,
    X: np.ndarray,
    y: np.ndarray,
    pool: Executor,
    keys: Keys,
    session: str,
    init: Federated | None = None,
    *,
    guest_only: bool = False,
) -> Federated:
    evals = [(X[:100, :SPLIT], y[:100])]

    async def guest() -> GuestModel:
        async with c["a"].session(session, peers=["b"]) as s:
            return await guest_train(
                s,
                ["b"],
                X[:, :SPLIT],
                y,
                PARAMS,
                eval_sets=evals,
                config=CONFIG,
                executor=pool,
                keys=keys,
                init_model=None if init is None else init.guest,
            )

    async def host() -> HostModel:
        part = None if init is None or guest_only else init.hosts[0]
        async with c["b"].session(session, peers=["a"]) as s:
            return await host_train(
                s,
                "a",
                X[:, SPLIT:],
                eval_sets=[X[:100, SPLIT:]],
                executor=pool,
                workers=2,
                init_model=part,
            )

    g, h = await asyncio.gather(guest(), host())
    return Federated(g, [h])


def _core(X: np.ndarray, y: np.ndarray, rounds: int) -> Booster:
    return train(replace(PARAMS, n_estimators=rounds), X, y, eval_sets=[(X[:100], y[:100])])


@pytest.mark.slow
async def test_three_rounds_and_three_more_are_six_in_one_go(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        first = await _train(c, X, y, pool, keys, "t1")
        assert first.guest.rng_state is not None
        more = await _train(c, X, y, pool, keys, "t2", init=first)
    core = _core(X, y, 6)
    assert_same_trees(more.joined(), core)
    assert more.guest.history == core.history  # the first rounds' evaluation carries on
    # Both halves predict: the continued files are a whole model.
    assert len(more.guest.trees) == 6
    assert {s.tree for s in first.hosts[0].splits} <= {s.tree for s in more.hosts[0].splits}


async def test_every_party_must_continue_the_same_model(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    X, y = X[:150], y[:150]
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        first = await _train(c, X, y, pool, keys, "t1")
        with pytest.raises(InputError, match="host 'b' starts afresh, the guest continues"):
            await _train(c, X, y, pool, keys, "t2", init=first, guest_only=True)
