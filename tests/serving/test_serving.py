"""Online and batch inference over real node sessions (memory transport and mutual TLS).

Scores are compared exactly (``==``) with the guest model's own prediction from every host's
local decisions: serving must not change a single bit of a margin.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import InputError, ModelError, PeerDisconnected, UnknownIdError
from p2pboost.hetero.inference.feature_store import ArrayStore, FeatureStore
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.hetero.model import HostModel
from p2pboost.net.node import Node
from p2pboost.testing import FAST, Fabric, LocalFederation, local_federation, time_factor
from tests.serving.conftest import HOST_COLS, Trained

CONFIG = dataclasses.replace(FAST, heartbeat_timeout=2.0, reconnect_timeout=3.0)


class RecordingStore(FeatureStore):
    """A host's store that remembers every id it was asked for."""

    def __init__(self, inner: ArrayStore) -> None:
        self.inner = inner
        self.asked: list[Any] = []

    @property
    def n_features(self) -> int:
        return self.inner.n_features

    async def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.asked.extend(ids.tolist())
        return await self.inner.lookup(ids)

    def ids(self) -> np.ndarray:
        return self.inner.ids()


@contextlib.asynccontextmanager
async def serving(
    c: LocalFederation,
    trained: Trained,
    stores: dict[str, FeatureStore] | None = None,
    models: dict[str, HostModel] | None = None,
    **kwargs: Any,
) -> AsyncIterator[GuestPredictor]:
    hosts = list(trained.guest.hosts)
    stores = {**{h: trained.store(h) for h in hosts}, **(stores or {})}
    models = {**{h: trained.host(h) for h in hosts}, **(models or {})}
    tasks = [asyncio.create_task(serve_host(c[h], models[h], stores[h])) for h in hosts]
    try:
        async with GuestPredictor(c["a"], trained.guest, **kwargs) as predictor:
            yield predictor
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_batch_is_exact_and_one_message_per_host(fabric: Fabric, trained: Trained) -> None:
    rows = np.arange(0, trained.ids.size, 3)
    async with (
        local_federation(fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, output="margin") as p,
    ):
        for _ in range(3):
            margin = await p.predict_batch(trained.ids[rows], trained.guest_X(rows))
            assert np.array_equal(margin, trained.reference_margin(rows))
        stats = p.stats()
    assert stats.messages_to_hosts == {"b": 3, "c": 3}  # one per host per batch
    assert stats.batches == 3
    assert stats.rows == 3 * rows.size


async def test_proba_output_and_best_iteration_defaults(
    memory_fabric: Fabric, trained: Trained
) -> None:
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained) as p,
    ):
        proba = await p.predict_batch(trained.ids[:5], trained.guest_X(slice(0, 5)))
        one = await p.predict(trained.ids[2], trained.guest_X(2))
    expected = trained.guest.transform(trained.reference_margin(slice(0, 5)))
    assert np.array_equal(proba, expected)
    assert one == expected[2]
    assert isinstance(one, float)


async def test_stream_of_1000_requests_in_order(memory_fabric: Fabric, trained: Trained) -> None:
    rng = np.random.default_rng(3)
    rows = rng.integers(0, trained.ids.size, 1000)
    expected = trained.guest.transform(trained.reference_margin(rows))

    async def requests() -> AsyncIterator[tuple[int, np.ndarray]]:
        for r in rows.tolist():
            yield int(trained.ids[r]), trained.guest_X(r)
            if r % 7 == 0:
                await asyncio.sleep(0)  # requests trickle in, as from a socket

    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, max_batch=64) as p,
    ):
        out = [pred async for pred in p.stream(requests())]
        stats = p.stats()
    assert [pred.id for pred in out] == trained.ids[rows].tolist()
    assert all(pred.error is None for pred in out)
    assert np.array_equal(np.array([pred.score for pred in out]), expected)
    assert 1000 / 64 <= stats.batches < 1000  # micro-batched, never more than max_batch


async def test_unknown_ids_fail_only_their_requests(
    memory_fabric: Fabric, trained: Trained
) -> None:
    lacking = ArrayStore(trained.ids[10:], trained.X[10:, HOST_COLS["c"]])  # c lacks ids[:10]
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, stores={"c": lacking}) as p,
    ):
        with pytest.raises(UnknownIdError) as info:
            await p.predict_batch(trained.ids[5:15], trained.guest_X(slice(5, 15)))
        assert info.value.peer == "c"
        assert info.value.ids == trained.ids[5:10].tolist()
        good, bad = await asyncio.gather(
            p.predict(trained.ids[20], trained.guest_X(20)),
            p.predict(trained.ids[3], trained.guest_X(3)),
            return_exceptions=True,
        )
    assert isinstance(good, float)
    assert isinstance(bad, UnknownIdError)
    assert bad.peer == "c"
    assert "no features for 1 requested id(s): 1003" in str(bad)


async def test_wrong_feature_count_is_refused(memory_fabric: Fabric, trained: Trained) -> None:
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained) as p,
    ):
        with pytest.raises(InputError, match="expected 10 guest features, got shape"):
            await p.predict(trained.ids[0], np.zeros(11))
        with pytest.raises(InputError, match=r"X must be \(2, 10\)"):
            await p.predict_batch(trained.ids[:2], np.zeros((2, 9)))
        with pytest.raises(InputError, match="unique"):
            await p.predict_batch([1000, 1000], np.zeros((2, 10)))
    with pytest.raises(InputError, match="feature store has 3 features"):
        await serve_host(c["b"], trained.host("b"), ArrayStore([1], np.zeros((1, 3))))


async def test_model_mismatch_is_refused_at_connect(
    memory_fabric: Fabric, trained: Trained
) -> None:
    other = dataclasses.replace(trained.host("c"), fingerprint="f" * 64)
    async with local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c:
        with pytest.raises(ModelError, match="host 'c' refused: host model fingerprint"):
            async with serving(c, trained, models={"c": other}):
                pass


@pytest.mark.slow
async def test_psi_alignment_hides_ids_a_host_lacks(
    memory_fabric: Fabric, trained: Trained
) -> None:
    keep = np.arange(trained.ids.size) % 4 != 0  # host b holds 3 rows in 4
    store = RecordingStore(ArrayStore(trained.ids[keep], trained.X[keep][:, HOST_COLS["b"]]))
    rows = np.arange(40)
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, stores={"b": store}, output="margin", host_timeout=30.0) as p,
    ):
        out = await p.predict_batch(trained.ids[rows], trained.guest_X(rows), align="psi")
    held = keep[rows]
    assert np.isnan(out[~held]).all()
    assert np.array_equal(out[held], trained.reference_margin(rows[held]))
    assert set(store.asked) == set(trained.ids[rows][held].tolist())  # never a lacking id


@pytest.mark.slow
async def test_host_down_fails_fast_and_serving_recovers(
    node_federation: Any, trained: Trained
) -> None:
    from p2pboost.testing import WebSocketFabric

    fabric = WebSocketFabric(node_federation)
    ids, Xg = trained.ids[:8], trained.guest_X(slice(0, 8))
    expected = trained.reference_margin(slice(0, 8))
    async with local_federation(fabric, ["a", "b", "c"], CONFIG) as c:
        address = c["c"].address
        server = asyncio.create_task(serve_host(c["c"], trained.host("c"), trained.store("c")))
        async with serving_b_only(c, trained, server) as p:
            assert np.array_equal(await p.predict_batch(ids, Xg), expected)
            server.cancel()
            await c["c"].close()  # host c goes down
            t0 = time.monotonic()
            with pytest.raises(PeerDisconnected) as info:
                await p.predict_batch(ids, Xg)
            assert info.value.peer == "c"
            assert time.monotonic() - t0 < 1.5 + 0.5 * time_factor()
            with pytest.raises(PeerDisconnected, match="'c'"):
                await p.predict(int(ids[0]), Xg[0])
            # host c comes back (a new process would do the same) at the same address
            peers: dict[str, str | None] = {"a": None, "b": None}
            back = Node(
                "c",
                listen=address,
                peers=peers,
                transport=fabric.transport("c", peers),
                config=CONFIG,
            )
            async with back:
                task = asyncio.create_task(serve_host(back, trained.host("c"), trained.store("c")))
                try:
                    assert np.array_equal(await p.predict_batch(ids, Xg), expected)
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)


@contextlib.asynccontextmanager
async def serving_b_only(
    c: LocalFederation, trained: Trained, others: asyncio.Task[None]
) -> AsyncIterator[GuestPredictor]:
    """Serve host b here; host c is served by the caller (who takes it down)."""
    task = asyncio.create_task(serve_host(c["b"], trained.host("b"), trained.store("b")))
    try:
        async with GuestPredictor(
            c["a"], trained.guest, output="margin", host_timeout=1.5
        ) as predictor:
            yield predictor
    finally:
        task.cancel()
        await asyncio.gather(task, others, return_exceptions=True)


async def test_fewer_rounds_means_fewer_host_bits(memory_fabric: Fabric, trained: Trained) -> None:
    rows = np.arange(50)
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, output="margin", n_rounds=2) as p,
    ):
        margin = await p.predict_batch(trained.ids[rows], trained.guest_X(rows))
        client = p._clients[0]
        assert client.n_splits > 0
        assert (client.expected_tree < 2).all()  # the host answers for the first 2 trees only
    decisions = [
        trained.host(h).decisions(trained.X[rows][:, HOST_COLS[h]]) for h in trained.guest.hosts
    ]
    assert np.array_equal(margin, trained.guest.predict_margin(trained.guest_X(rows), decisions, 2))


async def test_concurrent_requests_may_repeat_ids_and_mix_kinds(
    memory_fabric: Fabric, trained: Trained
) -> None:
    rows = [4, 4, 9]
    xs = [trained.guest_X(4), trained.guest_X(9), trained.guest_X(9)]  # id 1004 twice
    expected = trained.guest.transform(
        trained.guest.predict_margin(
            np.array(xs),
            [
                trained.host(h).decisions(trained.X[rows][:, HOST_COLS[h]])
                for h in trained.guest.hosts
            ],
        )
    )
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, max_wait=0.05) as p,
    ):
        out = await asyncio.gather(
            *(p.predict(int(trained.ids[r]), x) for r, x in zip(rows, xs, strict=True)),
            p.predict("not-a-customer", xs[0]),
            p.predict(3.5, xs[0]),
            return_exceptions=True,
        )
        assert p.stats().batches == 2  # one batch per id kind
        after = await p.predict(int(trained.ids[4]), xs[0])  # the sessions are still fine
    assert out[:3] == expected.tolist()
    assert isinstance(out[3], UnknownIdError)
    assert isinstance(out[4], InputError)
    assert "must be an int or a str" in str(out[4])
    assert after == expected[0]


async def test_batch_protocol_refuses_a_foreign_model_file(
    memory_fabric: Fabric, trained: Trained
) -> None:
    from p2pboost.hetero.inference.batch import guest_predict, host_predict

    other = dataclasses.replace(trained.host("b"), fingerprint="e" * 64)
    async with local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c:

        async def guest() -> object:
            async with c["a"].session("p", peers=["b", "c"]) as s:
                return await guest_predict(s, trained.guest, trained.guest_X(slice(0, 4)))

        async def host(name: str, model: HostModel) -> None:
            async with c[name].session("p", peers=["a"]) as s:
                await host_predict(s, model, trained.X[:4, HOST_COLS[name]])

        out = await asyncio.gather(
            guest(), host("b", other), host("c", trained.host("c")), return_exceptions=True
        )
    assert isinstance(out[1], ModelError)
    assert isinstance(out[0], Exception)  # the guest's session ends; it gets no margins
