"""Federated WOE/IV (:mod:`p2pboost.hetero.woe`): one encrypted pass, exact against plaintext.

The guest ``a`` holds the labels and 10 features, hosts ``b`` and ``c`` the others; every WOE
and IV the guest computes from decrypted host counts must equal the plaintext computation on
the joined data bit for bit (the counts are integers), and each host must receive only its
own kept names.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import RemoteProtocolError, SessionClosed
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.woe import bin_counts, select_by_iv, woe_table
from p2pboost.hetero import woe as woe_mod
from p2pboost.hetero._woe_messages import WoeCounts, WoeKept, WoeLabels
from p2pboost.hetero.woe import (
    HostWoe,
    WoeResult,
    abinning_guest,
    binning_host,
    guest_woe,
    host_woe,
)
from p2pboost.net.node import Node
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Keys

MAX_BIN = 8


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{j}" for j in range(n)]


async def _run(
    fabric: Any,
    X: np.ndarray,
    y: np.ndarray,
    pool: Executor,
    keys: Keys,
    **kwargs: Any,
) -> tuple[WoeResult, list[HostWoe]]:
    parts = {"b": X[:, 10:20], "c": X[:, 20:]}

    async with local_federation(fabric, ["a", "b", "c"], TRAINING) as fed:

        async def guest() -> WoeResult:
            async with fed["a"].session("woe", peers=list(parts)) as s:
                return await guest_woe(
                    s,
                    list(parts),
                    X[:, :10],
                    y,
                    max_bin=MAX_BIN,
                    keys=keys,
                    executor=pool,
                    feature_names=_names("g", 10),
                    party="a",
                    chunk_rows=100,
                    **kwargs,
                )

        async def host(h: str) -> HostWoe:
            async with fed[h].session("woe", peers=["a"]) as s:
                return await host_woe(s, "a", parts[h], feature_names=_names(h, 10))

        result, *hosts = await asyncio.gather(guest(), host("b"), host("c"))
    assert isinstance(result, WoeResult)
    return result, [h for h in hosts if isinstance(h, HostWoe)]


def _plain(X: np.ndarray, y: np.ndarray, monotone: Any = None) -> list[Any]:
    """The plaintext computation on the joined data, each party's columns binned apart."""
    out = []
    for cols in (slice(0, 10), slice(10, 20), slice(20, 30)):
        mapper = BinMapper(MAX_BIN).fit(X[:, cols])
        data = mapper.transform(X[:, cols])
        e, ne = bin_counts(data.codes, y, data.n_slots)
        out += woe_table(mapper, e, ne, monotone=monotone)
    return out


@pytest.mark.parametrize("monotone", [None, "auto"])
async def test_every_woe_and_iv_equals_the_plaintext_computation(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, monotone: Any
) -> None:
    X, y = breast
    result, hosts = await _run(MemoryFabric(), X, y, pool, keys, top_k=7, monotone=monotone)
    plain = _plain(X, y, monotone)
    assert len(result.features) == 30
    for got, want in zip(result.features, plain, strict=True):
        np.testing.assert_array_equal(got.bins.events, want.events)
        np.testing.assert_array_equal(got.bins.non_events, want.non_events)
        np.testing.assert_array_equal(got.bins.woe, want.woe)  # exact, not approximately
        assert got.iv == want.iv
        np.testing.assert_array_equal(got.bins.bin_of, want.bin_of)
    # The guest's own features carry their thresholds; a host's only codes.
    np.testing.assert_array_equal(result.features[0].bins.edges, plain[0].edges)
    kept = set(select_by_iv([p.iv for p in plain], top_k=7).tolist())
    assert [f.kept for f in result.features] == [i in kept for i in range(30)]
    # Each host receives its own kept names, nothing else.
    for k, (h, part) in enumerate(zip("bc", hosts, strict=True)):
        want_idx = [i - 10 * (k + 1) for i in sorted(kept) if 10 * (k + 1) <= i < 10 * (k + 2)]
        assert list(part.kept_index) == want_idx
        assert list(part.kept) == [f"{h}{i}" for i in want_idx]
        assert result.kept(h) == [f"#{i}" for i in want_idx]
    assert result.kept("a") == [f"g{i}" for i in sorted(kept) if i < 10]


async def test_threshold_selection_and_no_selection_keep_the_right_features(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    result, hosts = await _run(MemoryFabric(), X, y, pool, keys, threshold=1.0)
    assert all(f.kept == (f.iv >= 1.0) for f in result.features)
    assert any(f.kept for f in result.features)
    assert not all(f.kept for f in result.features)
    result, hosts = await _run(MemoryFabric(), X, y, pool, keys)
    assert all(f.kept for f in result.features)
    assert [len(h.kept) for h in hosts] == [10, 10]


async def test_guest_refuses_event_counts_above_the_rows_of_a_bin(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = breast
    public_key = keys[0]
    honest_send = woe_mod.send  # type: ignore[attr-defined]

    async def cheating_send(channel: Any, msg: Any) -> None:
        if isinstance(msg, WoeCounts):  # a host that claims 10**6 events in its first bin
            cts = msg.events.ciphertexts(public_key)
            cts[0] = public_key.encrypt(10**6)
            from p2pboost.crypto.additive import CiphertextBatch

            msg = WoeCounts(
                msg.n_value, msg.rows, CiphertextBatch.from_ciphertexts(public_key, cts)
            )
        await honest_send(channel, msg)

    monkeypatch.setattr(woe_mod, "send", cheating_send)
    with pytest.raises((RemoteProtocolError, SessionClosed, ExceptionGroup)) as caught:
        await _run(MemoryFabric(), X, y, pool, keys)
    assert "outside [0, rows of its bin]" in repr(caught.value)


async def test_guest_refuses_rows_that_do_not_sum(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = breast
    honest_send = woe_mod.send  # type: ignore[attr-defined]

    async def cheating_send(channel: Any, msg: Any) -> None:
        if isinstance(msg, WoeCounts):
            rows = msg.rows.copy()
            rows[0] += 1
            msg = WoeCounts(msg.n_value, rows, msg.events)
        await honest_send(channel, msg)

    monkeypatch.setattr(woe_mod, "send", cheating_send)
    with pytest.raises((RemoteProtocolError, SessionClosed, ExceptionGroup)) as caught:
        await _run(MemoryFabric(), X, y, pool, keys)
    assert "do not sum to its rows" in repr(caught.value)


async def test_host_refuses_labels_out_of_order(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = breast
    honest_send = woe_mod.send  # type: ignore[attr-defined]

    async def skipping_send(channel: Any, msg: Any) -> None:
        if isinstance(msg, WoeLabels) and msg.start == 100:  # the second chunk claims row 101
            msg = WoeLabels(101, msg.ct)
        await honest_send(channel, msg)

    monkeypatch.setattr(woe_mod, "send", skipping_send)
    with pytest.raises((RemoteProtocolError, SessionClosed, ExceptionGroup)) as caught:
        await _run(MemoryFabric(), X, y, pool, keys)
    assert "labels: rows 101+100, expected from 100" in repr(caught.value)


def test_counts_messages_hold_one_cell_per_bin() -> None:
    from p2pboost.crypto.additive import CiphertextBatch

    batch = CiphertextBatch(b"\0" * 16, 4, b"\0" * 4 * 5)
    ok = WoeCounts(np.array([2, 1]), np.array([1, 2, 0, 3, 0]), batch)
    assert ok.check() is None
    assert "5 cells" in (WoeCounts(np.array([2, 1]), np.array([1, 2, 0]), batch).check() or "")
    assert "negative" in (
        WoeCounts(np.array([2, 1]), np.array([1, -2, 0, 3, 0]), batch).check() or ""
    )
    assert WoeKept(np.array([0, 2])).check() is None
    assert "ascending" in (WoeKept(np.array([2, 0])).check() or "")


async def test_a_guest_with_labels_only_bins_the_hosts_features(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as fed:

        async def guest() -> WoeResult:
            async with fed["a"].session("woe", peers=["b"]) as s:
                return await guest_woe(
                    s, ["b"], None, y, max_bin=MAX_BIN, keys=keys, executor=pool, top_k=3
                )

        async def host() -> HostWoe:
            async with fed["b"].session("woe", peers=["a"]) as s:
                return await host_woe(s, "a", X[:, 10:20])

        result, own = await asyncio.gather(guest(), host())
    plain = _plain(X, y)[10:20]
    assert [f.iv for f in result.features] == [p.iv for p in plain]
    want = select_by_iv([p.iv for p in plain], top_k=3).tolist()
    assert list(own.kept) == [f"x{i}" for i in want]


@pytest.mark.slow
async def test_blocking_host_and_async_guest_over_mtls_websockets(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, federation_certs: Path
) -> None:
    """The host runs the blocking facade in its own thread with its own node; the guest the
    async one: over real WebSockets and mutual TLS on loopback, equal to plaintext."""
    X, y = breast
    with socket.socket() as sock:  # a free port for the host to listen on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"wss://127.0.0.1:{port}"
    host_node = Node(
        "b", listen=address, peers={"a": None}, tls=federation_certs / "b", config=TRAINING
    )
    guest_node = Node("a", peers={"b": address}, tls=federation_certs / "a", config=TRAINING)
    hosting = asyncio.ensure_future(asyncio.to_thread(binning_host, host_node, "a", X[:, 10:20]))
    async with guest_node:
        result = await abinning_guest(
            guest_node, ["b"], X[:, :10], y, max_bin=MAX_BIN, keys=keys, executor=pool, top_k=5
        )
    own = await hosting
    plain = _plain(X, y)[:20]
    for got, want in zip(result.features, plain, strict=True):
        np.testing.assert_array_equal(got.bins.woe, want.woe)
        assert got.iv == want.iv
    kept = select_by_iv([p.iv for p in plain], top_k=5).tolist()
    assert list(own.kept) == [f"x{i - 10}" for i in kept if i >= 10]
