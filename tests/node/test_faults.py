"""Faults: dropped and silent connections, absent peers, and hostile frames."""

from __future__ import annotations

import asyncio
import contextlib
import os

import numpy as np
import pytest

from p2pboost.exceptions import PeerDisconnected, RemoteProtocolError, SessionClosed
from p2pboost.net._frames import FLAG_END, FLAG_EOS, FLAG_RAW
from p2pboost.net.node import Node, SessionState
from p2pboost.testing import FAST, Fabric, local_federation, time_factor, wait_until
from tests.node.conftest import inject_data


async def _collect(node: Node, sid: str, peer: str, channel: str = "data") -> list[object]:
    async with node.session(sid, peers=[peer]) as session:
        return [item async for item in session.channel(peer, channel).stream()]


async def test_killed_connection_loses_nothing_and_duplicates_nothing(fabric: Fabric) -> None:
    n = 10_000
    async with local_federation(fabric, ["a", "b"]) as c:
        receiver = asyncio.create_task(_collect(c["b"], "stream", "a"))
        kills = 0
        async with c["a"].session("stream", peers=["b"]) as session:
            async with session.channel("b", "data").stream_writer() as w:
                for i in range(n):
                    await w.send({"i": i, "pad": b"x" * (i % 300)})
                    if i % 1000 == 500:
                        # Alternate an abort both ends notice with a message silently lost.
                        for conn in c.transports["a"].live():
                            if kills % 2:
                                conn.kill()
                            else:
                                conn.kill_after(1)
                        kills += 1
                        await asyncio.sleep(0.02)  # let the stream run into the dead link
            received = await receiver
        assert [item["i"] for item in received] == list(range(n))  # type: ignore[index]
        assert c["a"].stats().peers["b"].connections >= 6


async def test_killed_connection_mid_fragmented_message(fabric: Fabric) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 2**32, size=50_000 + i, dtype=np.uint32) for i in range(30)]
    async with local_federation(fabric, ["a", "b"]) as c:  # 200 KiB messages, 64 KiB fragments
        receiver = asyncio.create_task(_collect(c["b"], "big", "a"))
        async with c["a"].session("big", peers=["b"]) as session:
            async with session.channel("b", "data").stream_writer() as w:
                for i, arr in enumerate(arrays):
                    await w.send(arr)
                    if i % 5 == 2:
                        for conn in c.transports["a"].live():
                            conn.kill_after(2)  # dies between two fragments of a message
            received = await receiver
        assert len(received) == len(arrays)
        for got, want in zip(received, arrays, strict=True):
            np.testing.assert_array_equal(got, want)
        assert c["a"].stats().peers["b"].connections >= 4


async def test_slow_consumer_blocks_producer_with_bounded_memory(fabric: Fabric) -> None:
    window = FAST.window
    async with local_federation(fabric, ["a", "b"]) as c:
        sa = c["a"].session("bp", peers=["b"])
        sb = c["b"].session("bp", peers=["a"])
        sent = 0

        async def produce() -> None:
            nonlocal sent
            for _ in range(200):  # 200 x 10 KiB: eight windows
                await sa.channel("b", "slow").send(b"x" * 10_240)
                sent += 1

        producer = asyncio.create_task(produce())
        await asyncio.sleep(0.3)
        assert not producer.done(), "the producer should be blocked by the full window"
        stuck_at = sent
        assert stuck_at * 10_240 <= window
        # Another channel on the same link still flows while the first one is stalled.
        await sa.channel("b", "fast").send("still flowing")
        assert await sb.channel("a", "fast").recv() == "still flowing"
        for stats in (c["a"].stats(), c["b"].stats()):
            assert stats.buffered_bytes <= window, stats
        assert c["b"].stats().peers["a"].receive_buffer_bytes > window // 2
        await asyncio.sleep(0.1)
        assert sent == stuck_at  # still blocked
        slow = sb.channel("a", "slow")
        for _ in range(200):
            assert await slow.recv() == b"x" * 10_240
            assert c["b"].stats().buffered_bytes <= window
        await producer
        await sa.close()
        await sb.close()


async def test_hostile_payload_ends_only_its_session(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b"]) as c:
        good_rx = asyncio.create_task(_collect(c["b"], "good", "a"))
        bad_b = c["b"].session("bad", peers=["a"])
        bad_a = c["a"].session("bad", peers=["b"])
        async with c["a"].session("good", peers=["b"]) as good:
            async with good.channel("b", "data").stream_writer() as w:
                for i in range(2000):
                    await w.send(i)
                    if i == 1000:
                        inject_data(c["a"], "b", "bad", "data", os.urandom(200))
            with pytest.raises(RemoteProtocolError, match="undecodable") as info:
                await bad_b.channel("a", "data").recv()
            assert info.value.peer == "a"
            # The offender is told why its session ended.
            with pytest.raises(SessionClosed, match="aborted by peer 'b'"):
                await bad_a.channel("b", "data").recv()
        assert await good_rx == list(range(2000))
        await bad_a.close()
        await bad_b.close()


@pytest.mark.parametrize(
    ("what", "frames", "match"),
    [
        ("oversized fragment", [(200 * 1024, FLAG_END)], "fragment of 204800 bytes"),
        ("oversized message", [(60 * 1024, 0)] * 3 + [(10, FLAG_END)], "max_message_bytes"),
        ("beyond credit", [(60 * 1024, FLAG_END)] * 5, "beyond its credit"),
        ("empty fragment", [(0, 0)], "empty fragment"),
        ("RAW flag changed", [(100, FLAG_RAW), (100, FLAG_END)], "changed the RAW flag"),
        ("RAW end of stream", [(0, FLAG_END | FLAG_EOS | FLAG_RAW)], "end-of-stream"),
    ],
)
async def test_oversized_or_excess_frames_end_the_session(
    fabric: Fabric, what: str, frames: list[tuple[int, int]], match: str
) -> None:
    async with local_federation(fabric, ["a", "b"], max_message_bytes=150 * 1024) as c:
        victim = c["b"].session("bad", peers=["a"])
        healthy_b = c["b"].session("ok", peers=["a"])
        for size, flags in frames:
            inject_data(c["a"], "b", "bad", "data", b"\x01" * size, flags)
        # The frame itself ends the session, whether or not anyone reads the channel.
        await wait_until(lambda: victim.state is SessionState.FAILED)
        with pytest.raises(RemoteProtocolError, match=match) as info:
            await victim.channel("a", "data").recv()
        assert info.value.peer == "a", what
        async with c["a"].session("ok", peers=["b"]) as healthy_a:
            await healthy_a.channel("b").send("fine")
            assert await healthy_b.channel("a").recv() == "fine"
        await victim.close()
        await healthy_b.close()


async def test_garbage_envelope_resets_the_link_not_the_sessions(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b"]) as c:

        def errors() -> int:
            return c["b"].stats().peers["a"].link_errors

        async def corrupt() -> None:
            """Put garbage on a's live connection until b has noticed it once."""
            before = errors()
            while errors() == before:
                for conn in c.transports["a"].live():
                    await conn.send_raw(os.urandom(100))
                with contextlib.suppress(TimeoutError):  # a connection that was just dying
                    await wait_until(lambda: errors() > before, within=0.3)

        rx = asyncio.create_task(_collect(c["b"], "s", "a"))
        async with c["a"].session("s", peers=["b"]) as session:
            async with session.channel("b", "data").stream_writer() as w:
                for i in range(3000):
                    await w.send(i)
                    if i in (1000, 2000):
                        await corrupt()
            assert await rx == list(range(3000))
        assert errors() >= 2


@pytest.mark.slow
async def test_absent_peer_ends_its_sessions_and_the_node_serves_others(fabric: Fabric) -> None:
    timeout = FAST.reconnect_timeout
    async with local_federation(fabric, ["a", "b", "c"]) as c:
        with_b = c["a"].session("with-b", peers=["b"])
        with_c = c["a"].session("with-c", peers=["c"])
        c_side = c["c"].session("with-c", peers=["a"])
        await c["b"].close()  # b goes away for good
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(PeerDisconnected, match="'b'") as info:
            await with_b.channel("b").recv()
        elapsed = loop.time() - t0
        assert info.value.peer == "b"
        assert timeout * 0.9 <= elapsed <= timeout + 1.5 * time_factor()
        # a keeps serving c, in both directions.
        await with_c.channel("c").send_stream(range(100))
        assert [x async for x in c_side.channel("a").stream()] == list(range(100))
        await c_side.channel("a").send("bye")
        assert await with_c.channel("c").recv() == "bye"
        for s in (with_b, with_c, c_side):
            await s.close()


async def test_heartbeats_detect_a_silent_dead_link(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b"]) as c:
        rx = asyncio.create_task(_collect(c["b"], "s", "a"))
        loop = asyncio.get_running_loop()
        async with c["a"].session("s", peers=["b"]) as session:
            ch = session.channel("b", "data")
            await ch.send(0)
            c.transports["b"].silent = True  # b's link goes quiet without closing
            t0 = loop.time()
            for i in range(1, 50):
                await ch.send(i)
            await wait_until(lambda: not c["a"].stats().peers["b"].connected)
            detected = loop.time() - t0
            slack = 1.0 * time_factor()
            assert FAST.heartbeat_timeout * 0.8 <= detected <= FAST.heartbeat_timeout + slack
            c.transports["b"].silent = False
            await ch.send(50)
            await ch.end_stream()
            assert await rx == list(range(51))
