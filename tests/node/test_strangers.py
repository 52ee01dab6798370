"""A party never disturbs a session it is not part of, whoever claims the session and when.

Frames that arrive for a session before the application claims it wait per (session, sending
peer). Claiming with ``node.session(name, peers=...)`` adopts the declared peers' frames and
refuses everyone else's (an ABORT to them alone); ``accept_session()`` hands out one peer's
session at a time. So a party that knows (or guesses) a session's name can neither end it nor
join it, before or after it is claimed.
"""

from __future__ import annotations

import asyncio

import pytest

from p2pboost.exceptions import RemoteProtocolError, SessionClosed
from p2pboost.net._frames import FLAG_END, abort_frame, close_frame, encode_name
from p2pboost.net.node import Node, Session, SessionState
from p2pboost.testing import Fabric, local_federation, wait_until
from tests.node.conftest import inject_data


def _pending(node: Node) -> int:
    return node.stats().sessions


def _inject_control(node: Node, peer: str, frame: str, session: str) -> None:
    """Make ``node`` send a CLOSE or ABORT frame for ``session`` to ``peer``."""
    link = node._links[peer]
    seq = link.alloc_seq()
    sid = encode_name(session)
    raw = close_frame(seq, sid) if frame == "close" else abort_frame(seq, sid, "go away")
    link.push(seq, (raw,), None)


async def test_stranger_frames_before_the_claim_are_refused_and_the_session_runs(
    memory_fabric: Fabric,
) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"]) as c:
        # c guesses the name "ab" and writes to both members before either claims it.
        intruder = c["c"].session("ab", peers=["a", "b"])
        for peer in ("a", "b"):
            await intruder.channel(peer, "data").send("let me in")
            await intruder.channel(peer, "other").send_stream(range(3))
        _inject_control(c["c"], "b", "close", "ab")
        await wait_until(lambda: _pending(c["a"]) == 1 and _pending(c["b"]) == 1)
        # a writes first; b's application claims the session afterwards.
        ab_a = c["a"].session("ab", peers=["b"])
        await ab_a.channel("b", "data").send("early")
        await wait_until(lambda: _pending(c["b"]) == 2)  # c's and a's frames, kept apart
        ab_b = c["b"].session("ab", peers=["a"])
        assert ab_b.peers == ("a",)
        ch = ab_b.channel("a", "data")
        assert await ch.recv() == "early"
        await ab_a.channel("b", "data").send("later")
        assert await ch.recv() == "later"
        await ch.send("reply")
        assert await ab_a.channel("b", "data").recv() == "reply"
        assert ab_a.state is ab_b.state is SessionState.OPEN
        # The stranger was told, by each of them.
        with pytest.raises(SessionClosed, match="not a member"):
            await intruder.channel("a", "data").recv()
        assert c["b"].stats().sessions == 1  # c's frames were freed at b
        assert c["b"].stats().peers["c"].receive_buffer_bytes == 0
        # Frames c sends afterwards are refused (or dropped) without touching the session.
        inject_data(c["c"], "b", "ab", "data", b"\x01\x02", FLAG_END)
        _inject_control(c["c"], "a", "abort", "ab")
        await wait_until(lambda: all(link.drained for link in c["c"]._links.values()))
        await ab_a.channel("b", "data").send("still fine")
        assert await ch.recv() == "still fine"
        assert ab_a.state is ab_b.state is SessionState.OPEN
        for s in (ab_a, ab_b, intruder):
            await s.close()


async def test_early_frames_of_every_declared_peer_are_adopted(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"]) as c:
        b_side = c["b"].session("run", peers=["a"])
        c_side = c["c"].session("run", peers=["a"])
        await b_side.channel("a").send("from b")
        await c_side.channel("a").send_stream(range(5))
        await wait_until(lambda: _pending(c["a"]) == 2)
        run = c["a"].session("run", peers=["b", "c"])
        assert run.peers == ("b", "c")
        assert await run.channel("b").recv() == "from b"
        assert [x async for x in run.channel("c").stream()] == list(range(5))
        assert c["a"].stats().sessions == 1
        await run.channel("c").send("to c")
        assert await c_side.channel("a").recv() == "to c"
        for s in (run, b_side, c_side):
            await s.close()


async def test_a_declared_peer_that_broke_the_rules_before_the_claim_fails_the_session(
    memory_fabric: Fabric,
) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"]) as c:
        c_side = c["c"].session("run", peers=["a"])
        await c_side.channel("a").send("fine")
        inject_data(c["b"], "a", "run", "data", b"", 0)  # an empty fragment: b's fault
        await wait_until(lambda: _pending(c["a"]) == 2)
        run = c["a"].session("run", peers=["b", "c"])
        with pytest.raises(RemoteProtocolError, match="empty fragment") as info:
            await run.channel("c").recv()
        assert info.value.peer == "b"
        # c, a member, is told at the claim (b was told when it broke the rule).
        with pytest.raises(SessionClosed, match="aborted by peer 'a'"):
            await c_side.channel("a").recv()
        await run.close()
        await c_side.close()


async def test_a_stranger_cannot_join_a_session_a_peer_opened(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b", "c"]) as c:
        from_a = c["a"].session("job", peers=["b"])
        await from_a.channel("b").send("a's request")
        await wait_until(lambda: _pending(c["b"]) == 1)
        from_c = c["c"].session("job", peers=["b"])
        await from_c.channel("b").send("c's request")
        await wait_until(lambda: _pending(c["b"]) == 2)
        accepted = await c["b"].accept_session()
        assert (accepted.id, accepted.peers) == ("job", ("a",))
        assert await accepted.channel("a").recv() == "a's request"
        # While a's "job" runs, c's "job" waits its turn as a session of its own.
        await from_c.channel("b").send("c again")
        waiting = asyncio.create_task(c["b"].accept_session())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await accepted.channel("a").send("done")
        assert await from_a.channel("b").recv() == "done"
        await accepted.close()
        second = await asyncio.wait_for(waiting, 5)
        assert (second.id, second.peers) == ("job", ("c",))
        assert [await second.channel("c").recv() for _ in range(2)] == ["c's request", "c again"]
        await second.abort("not for you")
        with pytest.raises(SessionClosed, match="not for you"):
            await from_c.channel("b").recv()
        with pytest.raises(SessionClosed, match="'b' left"):
            await from_a.channel("b").recv()  # a's session ended normally, untouched
        for s in (from_a, from_c):
            await s.close()


async def test_a_stranger_first_does_not_take_the_name_from_the_rightful_peer(
    memory_fabric: Fabric,
) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"]) as c:
        from_c = c["c"].session("job", peers=["b"])
        await from_c.channel("b").send("c first")
        await wait_until(lambda: _pending(c["b"]) == 1)
        from_a = c["a"].session("job", peers=["b"])
        await from_a.channel("b").send("a's request")
        await wait_until(lambda: _pending(c["b"]) == 2)

        async def serve_only_a() -> Session:
            while True:
                session = await c["b"].accept_session()
                if session.peers == ("a",):
                    return session
                await session.abort("not an inference session with 'a'")

        served = await asyncio.wait_for(serve_only_a(), 5)
        assert await served.channel("a").recv() == "a's request"
        await served.channel("a").send("answer")
        assert await from_a.channel("b").recv() == "answer"
        with pytest.raises(SessionClosed, match="not an inference session"):
            await from_c.channel("b").recv()
        for s in (served, from_a, from_c):
            await s.close()


async def test_a_strangers_close_or_abort_before_the_claim_touches_nothing(
    fabric: Fabric,
) -> None:
    async with local_federation(fabric, ["a", "b", "c"]) as c:
        ab_a = c["a"].session("ab", peers=["b"])
        await ab_a.channel("b").send("hello")
        inject_data(c["c"], "b", "ab", "default", b"\x01", FLAG_END)
        _inject_control(c["c"], "b", "abort", "ab")
        _inject_control(c["c"], "b", "close", "ab")
        await wait_until(lambda: all(link.drained for link in c["c"]._links.values()))
        await wait_until(lambda: _pending(c["b"]) == 2)
        ab_b = c["b"].session("ab", peers=["a"])
        assert ab_b.state is SessionState.OPEN
        assert await ab_b.channel("a").recv() == "hello"
        await ab_b.channel("a").send("hi")
        assert await ab_a.channel("b").recv() == "hi"
        await ab_a.close()
        await ab_b.close()


async def test_per_peer_limits_apply_to_each_peer_separately(memory_fabric: Fabric) -> None:
    async with local_federation(
        memory_fabric, ["a", "b", "c"], max_sessions_per_peer=2, unclaimed_timeout=0.5
    ) as c:
        # c fills its quota at b with sessions b's application never claims.
        spam = [c["c"].session(f"c{i}", peers=["b"]) for i in range(3)]
        for s in spam:
            await s.channel("b").send("x")
        with pytest.raises(SessionClosed, match="too many concurrent sessions from 'c'"):
            await spam[2].channel("b").recv()
        # a's quota is its own: both of a's sessions get through, and b claims them.
        mine = [c["a"].session(f"s{i}", peers=["b"]) for i in range(2)]
        for i, s in enumerate(mine):
            await s.channel("b").send(i)
        await wait_until(lambda: _pending(c["b"]) == 4)
        claimed = [c["b"].session(f"s{i}", peers=["a"]) for i in range(2)]
        assert [await s.channel("a").recv() for s in claimed] == [0, 1]
        # c's unclaimed sessions expire on their own clock, freeing c's quota.
        for s in spam[:2]:
            with pytest.raises(SessionClosed, match="not claimed by the application in time"):
                await s.channel("b").recv()
        assert all(s.state is SessionState.OPEN for s in claimed + mine)
        later = c["c"].session("c3", peers=["b"])
        await later.channel("b").send("admitted")
        accepted = await c["b"].accept_session()
        assert (accepted.id, await accepted.channel("c").recv()) == ("c3", "admitted")
        for s in [*claimed, *mine, *spam, later, accepted]:
            await s.close()
