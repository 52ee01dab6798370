"""Sessions, channels, streams and large messages between healthy nodes."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import ConfigError, InputError, LocalProtocolError, SessionClosed
from p2pboost.net.node import Node, NodeConfig, Session
from p2pboost.testing import Fabric, local_federation
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport


async def test_request_response_and_stream(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b"]) as c:

        async def serve() -> list[object]:
            session = await c["b"].accept_session()
            async with session:
                ch = session.channel("a", "rpc")
                request = await ch.recv()
                await ch.send({"echo": request})
                return [item async for item in session.channel("a", "items").stream()]

        server = asyncio.create_task(serve())
        async with c["a"].session("s1", peers=["b"]) as session:
            rpc = session.channel("b", "rpc")
            await rpc.send([1, "two", b"three"])
            assert await rpc.recv() == {"echo": [1, "two", b"three"]}
            assert await session.channel("b", "items").send_stream(range(500)) == 500
        assert await server == list(range(500))


async def test_large_messages_are_fragmented_and_reassembled(fabric: Fabric) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, size=n, dtype=np.uint8) for n in (1, 70_000, 3_000_001)]
    async with local_federation(fabric, ["a", "b"]) as c:
        async with (
            c["a"].session("big", peers=["b"]) as sa,
            c["b"].session("big", peers=["a"]) as sb,
        ):
            sender, receiver = sa.channel("b"), sb.channel("a")

            async def produce() -> None:
                async with sender.stream_writer() as w:
                    for arr in arrays:
                        await w.send(arr)

            producer = asyncio.create_task(produce())
            received = [item async for item in receiver.stream()]
            await producer
    assert len(received) == len(arrays)
    for got, want in zip(received, arrays, strict=True):
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, want)


async def test_hundred_concurrent_sessions(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b"]) as c:

        async def serve_one(session: Session) -> None:
            async with session:
                ch = session.channel("a", "work")
                total: Any = 0
                async for x in ch.stream():
                    total += x
                await ch.send(total)

        async def server() -> None:
            async with asyncio.TaskGroup() as tg:
                for _ in range(100):
                    tg.create_task(serve_one(await c["b"].accept_session()))

        async def client(i: int) -> int:
            async with c["a"].session(f"job-{i}", peers=["b"]) as session:
                ch = session.channel("b", "work")
                await ch.send_stream(range(i, i + 50))
                result = await ch.recv()
                assert isinstance(result, int)
                return result

        srv = asyncio.create_task(server())
        results = await asyncio.gather(*(client(i) for i in range(100)))
        await srv
        assert results == [sum(range(i, i + 50)) for i in range(100)]
        stats = c["a"].stats()
        assert stats.sessions == 0
        assert stats.peers["b"].messages_sent == 100 * 50


async def test_session_closed_by_peer_after_draining(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b"]) as c:
        async with c["a"].session("s", peers=["b"]) as sa:
            await sa.channel("b").send("last words")
        sb = c["b"].session("s", peers=["a"])
        ch = sb.channel("a")
        assert await ch.recv() == "last words"
        with pytest.raises(SessionClosed, match="'a' left"):
            await ch.recv()
        with pytest.raises(SessionClosed):
            await ch.send("too late")
        await sb.close()


async def test_api_misuse_is_reported(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b"]) as c:
        a = c["a"]
        with pytest.raises(InputError, match="unknown peers"):
            a.session("x", peers=["zed"])
        with pytest.raises(InputError, match="give its peers"):
            a.session("y")
        session = a.session("s", peers=["b"])
        with pytest.raises(LocalProtocolError, match="already open"):
            a.session("s", peers=["b"])
        with pytest.raises(InputError, match="not a peer"):
            session.channel("a")
        with pytest.raises(InputError):
            await session.channel("b").send(object())
        await session.channel("b").end_stream()
        sb = c["b"].session("s", peers=["a"])
        with pytest.raises(LocalProtocolError, match="end-of-stream"):
            await sb.channel("a").recv()
        await session.close()
        await sb.close()
        with pytest.raises(SessionClosed):
            await session.channel("b").send(1)


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="heartbeat_timeout"):
        NodeConfig(heartbeat_interval=2.0, heartbeat_timeout=1.0)
    with pytest.raises(ConfigError, match="window"):
        NodeConfig(window=0)
    network = MemoryNetwork()
    with pytest.raises(ConfigError, match="no address"):
        Node("a", peers={"b": None}, transport=MemoryTransport(network, "a"))
    with pytest.raises(ConfigError, match="must listen"):
        Node("b", peers={"a": None}, transport=MemoryTransport(network, "b"))
    with pytest.raises(ConfigError, match="itself"):
        Node("a", peers={"a": "x"}, transport=MemoryTransport(network, "a"))


async def test_bytes_skip_the_codec_and_arrive_as_bytes(fabric: Fabric) -> None:
    blobs: list[object] = [b"x", bytearray(b"mutable"), b"", bytes(range(256)) * 12_289, b"y"]
    async with local_federation(fabric, ["a", "b"]) as c:
        async with c["a"].session("s", peers=["b"]) as sa, c["b"].session("s", peers=["a"]) as sb:
            producer = asyncio.create_task(sa.channel("b").send_stream(blobs))
            received = [item async for item in sb.channel("a").stream()]
            await producer
    assert received == [bytes(b) for b in blobs]  # type: ignore[call-overload]
    assert all(type(item) is bytes for item in received)


@pytest.mark.parametrize("size", [100_000, 200_000, 300_000])
async def test_messages_near_the_window_size_do_not_deadlock(
    memory_fabric: Fabric, size: int
) -> None:
    # A sender short of credit waits for a whole fragment only when the peer is sure to grant
    # it (half a window); bigger fragments are split so that they always get through.
    async with local_federation(memory_fabric, ["a", "b"], max_fragment=1 << 20) as c:
        async with c["a"].session("s", peers=["b"]) as sa, c["b"].session("s", peers=["a"]) as sb:
            blobs = [bytes([i]) * size for i in range(6)]
            producer = asyncio.create_task(sa.channel("b").send_stream(blobs))
            async with asyncio.timeout(10):
                received = [item async for item in sb.channel("a").stream()]
            await producer
        assert received == blobs
