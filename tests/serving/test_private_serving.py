"""Online private inference: sessions set up once, scores equal the default ones, unknown
ids fail only their rows, and a host that insists on one mode refuses the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pytest

from p2pboost.crypto.keys import make_keypair
from p2pboost.exceptions import P2PBoostError, UnknownIdError
from p2pboost.hetero._messages import PrivateAnswer, PrivateQuery, Query, QueryBits
from p2pboost.hetero.inference import session as session_module
from p2pboost.hetero.inference.feature_store import ArrayStore, FeatureStore
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.testing import Fabric, LocalFederation, local_federation
from p2pboost.workers import process_pool
from tests.serving.conftest import HOST_COLS, Trained
from tests.serving.test_serving import CONFIG

KEYS = make_keypair("ou", 1024, allow_insecure=True)


@pytest.fixture(scope="module")
def pool() -> Iterator[Executor]:
    with process_pool(1) as executor:
        list(executor.map(abs, range(1)))
        yield executor


@contextlib.asynccontextmanager
async def private_serving(
    c: LocalFederation,
    trained: Trained,
    pool: Executor,
    stores: dict[str, FeatureStore] | None = None,
    host_private: bool | None = True,
    guest_private: bool = True,
) -> AsyncIterator[GuestPredictor]:
    hosts = list(trained.guest.hosts)
    stores = {**{h: trained.store(h) for h in hosts}, **(stores or {})}
    tasks = [
        asyncio.create_task(
            serve_host(c[h], trained.host(h), stores[h], executor=pool, private=host_private)
        )
        for h in hosts
    ]
    try:
        async with GuestPredictor(
            c["a"],
            trained.guest,
            output="margin",
            private=guest_private,
            keys=KEYS,
            executor=pool,
            host_timeout=30.0,
        ) as predictor:
            yield predictor
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_private_sessions_score_as_the_default_protocol(
    memory_fabric: Fabric, trained: Trained, pool: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []
    original = session_module.recv  # type: ignore[attr-defined]

    async def recording(channel: Any, expected: Any) -> Any:
        msg = await original(channel, expected)
        seen.append(msg)
        return msg

    monkeypatch.setattr(session_module, "recv", recording)
    rows = np.arange(0, 20)
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        private_serving(c, trained, pool) as p,
    ):
        margin = await p.predict_batch(trained.ids[rows], trained.guest_X(rows))
        one = await p.predict(trained.ids[3], trained.guest_X(3))
    np.testing.assert_allclose(margin, trained.reference_margin(rows), rtol=0, atol=1e-9)
    np.testing.assert_allclose(one, trained.reference_margin(slice(3, 4))[0], atol=1e-9)
    kinds = {type(m) for m in seen}
    assert PrivateAnswer in kinds  # the guest's side was recorded
    assert PrivateQuery in kinds  # and the hosts'
    assert QueryBits not in kinds  # no decision bits
    assert Query not in kinds
    totals = [m.ct for m in seen if isinstance(m, PrivateAnswer) and m.ct is not None]
    assert sum(len(ct) for ct in totals) == rows.size + 1  # one ciphertext per row, no more


async def test_unknown_ids_fail_only_their_rows_in_private_mode(
    memory_fabric: Fabric, trained: Trained, pool: Executor
) -> None:
    lacking = ArrayStore(trained.ids[10:], trained.X[10:, HOST_COLS["c"]])
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        private_serving(c, trained, pool, stores={"c": lacking}) as p,
    ):
        good = await p.predict(trained.ids[12], trained.guest_X(12))
        with pytest.raises(UnknownIdError):
            await p.predict(trained.ids[2], trained.guest_X(2))
    np.testing.assert_allclose(good, trained.reference_margin(slice(12, 13))[0], atol=1e-9)


@pytest.mark.parametrize("host_private", [True, False])
async def test_a_host_refuses_the_mode_it_does_not_serve(
    memory_fabric: Fabric, trained: Trained, pool: Executor, host_private: bool
) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c:
        serving = private_serving(
            c, trained, pool, host_private=host_private, guest_private=not host_private
        )
        with pytest.raises(P2PBoostError):
            async with serving as p:
                await p.predict_batch(trained.ids[:3], trained.guest_X(slice(0, 3)))
