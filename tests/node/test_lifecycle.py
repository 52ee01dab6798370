"""Session admission, peer restarts, anyio, and a clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest

from p2pboost.exceptions import (
    LocalProtocolError,
    PeerDisconnected,
    SessionClosed,
)
from p2pboost.net.node import Node, Session, SessionState
from p2pboost.testing import (
    FAST,
    Fabric,
    FaultyTransport,
    MemoryFabric,
    local_federation,
    wait_until,
)
from p2pboost.transports.base import Transport
from p2pboost.transports.errors import TransportError
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport


async def test_sessions_beyond_the_limit_are_refused(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b"], max_sessions=3) as c:
        a, b = c["a"], c["b"]
        mine = [a.session(f"s{i}", peers=["b"]) for i in range(3)]
        for i, session in enumerate(mine):  # fill b's three slots; b does not claim them yet
            await session.channel("b").send(i)
        await wait_until(lambda: b.stats().sessions == 3)
        with pytest.raises(LocalProtocolError, match="too many concurrent sessions"):
            b.session("mine", peers=["a"])
        await mine[0].close()  # frees a slot at a, not at b
        refused = a.session("s3", peers=["b"])
        await refused.channel("b").send("knock")
        with pytest.raises(SessionClosed, match="too many concurrent sessions"):
            await refused.channel("b").recv()
        first = await b.accept_session()
        assert first.id == "s0"
        assert await first.channel("a").recv() == 0
        await first.close()  # now b has a free slot
        await refused.close()
        admitted = a.session("s4", peers=["b"])
        await admitted.channel("b").send("hello")
        later = [await b.accept_session() for _ in range(3)]
        assert [s.id for s in later] == ["s1", "s2", "s4"]
        assert await later[2].channel("a").recv() == "hello"


async def test_stranger_frames_are_refused_without_disturbing_the_session() -> None:
    fabric = MemoryFabric()
    async with local_federation(fabric, ["a", "b", "c"]) as c:
        ab_b = c["b"].session("ab", peers=["a"])
        ab_a = c["a"].session("ab", peers=["b"])
        intruder = c["c"].session("ab", peers=["b"])
        await intruder.channel("b").send("let me in")
        with pytest.raises(SessionClosed, match="not a member"):
            await intruder.channel("b").recv()
        await ab_a.channel("b").send("legit")
        assert await ab_b.channel("a").recv() == "legit"
        for s in (ab_a, ab_b, intruder):
            await s.close()


def _node_b(transport: Transport) -> Node:
    return Node("b", listen="mem://b", peers={"a": None}, transport=transport, config=FAST)


@contextlib.asynccontextmanager
async def _b_crashes_in(session_id: str) -> AsyncIterator[tuple[MemoryNetwork, Node, Session]]:
    """Node ``a`` and its session ``session_id`` with ``b``, whose process has just crashed
    (its goodbyes never left); ``b`` may start again on the same network."""
    network = MemoryNetwork()
    crashing = FaultyTransport(MemoryTransport(network, "b"))
    a_transport = MemoryTransport(network, "a")
    async with Node("a", peers={"b": "mem://b"}, transport=a_transport, config=FAST) as a:
        async with _node_b(crashing) as b:
            old = a.session(session_id, peers=["b"])
            await old.channel("b").send("hi")
            assert await b.session(session_id, peers=["a"]).channel("a").recv() == "hi"
            crashing.silent = True
        yield network, a, old


async def test_peer_restart_ends_its_sessions_and_the_link_recovers() -> None:
    async with _b_crashes_in("old") as (network, a, old):
        async with _node_b(MemoryTransport(network, "b")) as b2:
            with pytest.raises(PeerDisconnected, match="restarted") as info:
                await old.channel("b").recv()
            assert info.value.peer == "b"
            async with a.session("new", peers=["b"]) as new:
                await new.channel("b").send("again")
                assert await b2.session("new", peers=["a"]).channel("a").recv() == "again"
            await old.close()


async def test_a_restarted_peer_may_reopen_the_sessions_it_was_in() -> None:
    """A party resuming after a crash opens its old process's sessions again, under the same
    ids and maybe before we do: its frames are not taken for late frames of the old ones."""
    async with _b_crashes_in("train") as (network, a, old):
        # The old process gave up on a session we had not opened yet: an ABORT kept here.
        a._mux._remember_abort("predict", "b", "peer code raised")
        async with _node_b(MemoryTransport(network, "b")) as b2:
            with pytest.raises(PeerDisconnected, match="restarted") as info:
                await old.channel("b").recv()
            assert info.value.restarted
            await old.close()  # ended here, after the restart
            resumed = b2.session("train", peers=["a"])
            await resumed.channel("a").send("resume")  # the restarted peer speaks first
            await asyncio.sleep(0.05)
            async with asyncio.timeout(5), a.session("train", peers=["b"]) as again:
                assert await again.channel("b").recv() == "resume"
            await resumed.close()
            # ... and that ABORT is the old process's: the new one's session is not failed.
            predict_b = b2.session("predict", peers=["a"])
            await predict_b.channel("a").send("scores?")
            async with asyncio.timeout(5), a.session("predict", peers=["b"]) as predict_a:
                assert await predict_a.channel("b").recv() == "scores?"
            await predict_b.close()


def test_works_under_anyio() -> None:
    async def main() -> list[int]:
        network = MemoryNetwork()
        cfg = replace(FAST, close_timeout=1.0)
        async with (
            Node(
                "b",
                listen="mem://b",
                peers={"a": None},
                transport=MemoryTransport(network, "b"),
                config=cfg,
            ) as b,
            Node(
                "a", peers={"b": "mem://b"}, transport=MemoryTransport(network, "a"), config=cfg
            ) as a,
        ):
            got: list[int] = []

            async def consume() -> None:
                async with b.session("x", peers=["a"]) as s:
                    async for item in s.channel("a").stream():
                        assert isinstance(item, int)
                        got.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                async with a.session("x", peers=["b"]) as s:
                    with anyio.fail_after(5):
                        await s.channel("b").send_stream(range(300))
            with anyio.move_on_after(0.05) as scope:  # cancellation reaches a waiting recv
                async with a.session("idle", peers=["b"]) as s:
                    await s.channel("b").recv()
            assert scope.cancelled_caught
            return got

    assert anyio.run(main, backend="asyncio") == list(range(300))


async def test_exit_leaves_no_task_behind() -> None:
    before = asyncio.all_tasks()
    fabric = MemoryFabric()
    async with local_federation(fabric, ["a", "b", "c"]) as c:
        async with c["a"].session("s", peers=["b", "c"]) as s:
            await s.channel("b").send(1)
            await s.channel("c").send(2)
        waiting = asyncio.create_task(c["b"].session("z", peers=["a"]).channel("a").recv())
        await asyncio.sleep(0.01)
    with pytest.raises(SessionClosed):
        await waiting
    assert asyncio.all_tasks() == before


async def test_redial_backs_off_exponentially_up_to_the_cap(memory_fabric: Fabric) -> None:
    assert isinstance(memory_fabric, MemoryFabric)
    async with local_federation(memory_fabric, ["a", "b"]) as c:
        rx = asyncio.create_task(c["b"].session("s", peers=["a"]).channel("a").recv())
        before = c["a"].stats().peers["b"].dial_attempts
        memory_fabric.network.refuse("mem://b", 1.0)
        memory_fabric.network.drop_all()
        async with c["a"].session("s", peers=["b"]) as s:
            await s.channel("b").send("sent while b is unreachable")
            assert await rx == "sent while b is unreachable"
        attempts = c["a"].stats().peers["b"].dial_attempts - before
        # 10, 20, 40, 80 ms then the 100 ms cap, each jittered to 50-100 %: about 16 attempts
        # in 1 s. Without back-off there would be hundreds, without the cap about 8.
        assert 11 <= attempts <= 30, attempts


async def test_a_stranger_or_wrong_way_connection_is_refused() -> None:
    network = MemoryNetwork()
    async with (
        Node(
            "b",
            listen="mem://b",
            peers={"a": None},
            transport=MemoryTransport(network, "b"),
            config=FAST,
        ) as b,
        Node(
            "a", peers={"b": "mem://b"}, transport=MemoryTransport(network, "a"), config=FAST
        ) as a,
    ):
        stranger = await MemoryTransport(network, "zed").connect("mem://b", peer_id="b")
        with pytest.raises(TransportError):
            await stranger.receive()
        async with a.session("s", peers=["b"]) as s:
            await s.channel("b").send("still fine")
            assert await b.session("s", peers=["a"]).channel("a").recv() == "still fine"


async def test_an_error_in_the_session_body_aborts_it_for_the_peers(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"]) as c:
        b_side = c["b"].session("run", peers=["a"])
        c_side = c["c"].session("run", peers=["a"])

        async def failing_run() -> None:
            async with c["a"].session("run", peers=["b", "c"]) as s:
                await s.channel("b").send("started")
                raise ZeroDivisionError("secret local detail")

        with pytest.raises(ZeroDivisionError):
            await failing_run()
        for side in (b_side, c_side):
            with pytest.raises(SessionClosed, match="aborted by peer 'a'") as info:
                await side.channel("a").recv()
            assert info.value.reason == "peer code raised ZeroDivisionError"
            assert "secret" not in str(info.value)
            await side.close()
        assert c["a"].stats().sessions == 0


async def test_cancelling_a_send_mid_message_ends_the_session(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b"]) as c:
        session = c["a"].session("s", peers=["b"])
        c["b"].session("s", peers=["a"])  # b never reads: the window fills mid-message
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await session.channel("b").send(bytes(3 * FAST.window))
        assert session.state is SessionState.FAILED
        with pytest.raises(LocalProtocolError, match="interrupted mid-message"):
            await session.channel("b").send(b"more")


async def test_per_peer_limit_and_unclaimed_sessions_expire(memory_fabric: Fabric) -> None:
    async with local_federation(
        memory_fabric, ["a", "b"], max_sessions_per_peer=2, unclaimed_timeout=0.3
    ) as c:
        mine = [c["a"].session(f"s{i}", peers=["b"]) for i in range(3)]
        for session in mine:
            await session.channel("b").send("hello")
        with pytest.raises(SessionClosed, match="too many concurrent sessions from 'a'"):
            await mine[2].channel("b").recv()
        # b's application never claims s0 and s1: they are aborted, freeing the slots.
        for session in mine[:2]:
            with pytest.raises(SessionClosed, match="not claimed by the application in time"):
                await session.channel("b").recv()
        assert c["b"].stats().sessions == 0
        async with c["a"].session("later", peers=["b"]) as later:
            await later.channel("b").send("admitted")
            assert await (await c["b"].accept_session()).channel("a").recv() == "admitted"
