"""The link protocol against a hand-driven peer: HELLO, sequence numbers, acks, resume.

The peer here is a bare transport connection speaking the wire format byte by byte (as h11's
tests drive one side by hand), so every check of the node can be provoked exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from p2pboost import codec
from p2pboost.net._frames import (
    FLAG_END,
    FLAG_RAW,
    Data,
    Frame,
    Hello,
    data_header,
    datax_header,
    encode_hello,
    encode_message,
    encode_name,
    parse_hello,
    parse_message,
)
from p2pboost.net.node import Node
from p2pboost.testing import FAST, time_factor, wait_until
from p2pboost.transports.base import Connection
from p2pboost.transports.errors import TransportError
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport

EPOCH = 0x5EED


@pytest.fixture
async def node_b() -> AsyncIterator[tuple[Node, MemoryNetwork]]:
    network = MemoryNetwork()
    transport = MemoryTransport(network, "b")
    async with Node(
        "b", listen="mem://b", peers={"a": None}, transport=transport, config=FAST
    ) as b:
        yield b, network


async def _dial(
    network: MemoryNetwork, recv_epoch: int = 0, recv_seq: int = 0
) -> tuple[Connection, Hello]:
    conn = await MemoryTransport(network, "a").connect("mem://b", peer_id="b")
    hello = Hello("a", EPOCH, recv_epoch, recv_seq, window=1 << 20, max_fragment=1 << 16)
    await conn.send(encode_hello(hello))
    return conn, parse_hello(await conn.receive())


def _data(seq: int, obj: object, session: str = "s", channel: str = "ch") -> list[bytes]:
    payload = codec.encode(obj)
    names = encode_name(session) + encode_name(channel)
    return [data_header(seq, FLAG_END, names, len(payload)), payload]


async def _next_frames(conn: Connection) -> tuple[int, list[Frame]]:
    """The next message from the node (it may be an empty heart-beat or ack)."""
    async with asyncio.timeout(5):
        return parse_message(await conn.receive())


def _data_frames(frames: list[Frame]) -> list[Data]:
    return [f for f in frames if isinstance(f, Data)]


async def _read_until_closed(conn: Connection) -> None:
    while True:
        await conn.receive()


async def _closed_by_node(conn: Connection) -> None:
    async with asyncio.timeout(5):
        with pytest.raises(TransportError):
            await _read_until_closed(conn)


async def test_hello_then_data_is_delivered_and_acked(node_b: tuple[Node, MemoryNetwork]) -> None:
    b, network = node_b
    conn, hello = await _dial(network)
    assert (hello.party_id, hello.recv_epoch, hello.recv_seq) == ("b", 0, 0)
    assert hello.window == FAST.window
    await conn.send(encode_message(0, _data(7, "first")))  # a fresh epoch may start anywhere
    await conn.send(encode_message(0, _data(8, "second")))
    session = await b.accept_session()
    ch = session.channel("a", "ch")
    assert [await ch.recv(), await ch.recv()] == ["first", "second"]
    ack = 0
    while ack < 8:  # a delayed stand-alone ack arrives without anything else to carry it
        ack, frames = await _next_frames(conn)
        assert frames == []
    assert ack == 8
    # The node answers on the channel: its frames are numbered from 1 and carry the ack.
    await ch.send("reply")
    ack, frames = await _next_frames(conn)
    assert ack == 8
    assert [f.seq for f in frames] == [1]
    await conn.close()


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (encode_message(0, _data(2, "x")), "gap in the sequence"),
        (encode_message(99, []), "ack of a frame never sent"),
        (b"\x01P2PB" + bytes(40), "a second HELLO"),
        (b"\x02" + bytes(8) + b"\xff" * 20, "garbage frame"),
    ],
)
async def test_link_level_violation_drops_the_connection_only(
    node_b: tuple[Node, MemoryNetwork], bad: bytes, why: str
) -> None:
    b, network = node_b
    conn, _ = await _dial(network)
    await conn.send(encode_message(0, _data(10, "ok")))
    session = await b.accept_session()
    assert await session.channel("a", "ch").recv() == "ok"
    if why == "gap in the sequence":
        bad = encode_message(0, _data(12, "skipped 11"))
    await conn.send(bad)
    await _closed_by_node(conn)
    await wait_until(lambda: b.stats().peers["a"].link_errors == 1)
    # The link state survives: a new connection resumes after frame 10, and the session lives.
    conn, hello = await _dial(network)
    assert (hello.recv_epoch, hello.recv_seq) == (EPOCH, 10), why
    await conn.send(encode_message(0, _data(11, "resumed")))
    assert await session.channel("a", "ch").recv() == "resumed"
    await conn.close()


async def test_resume_resends_exactly_what_the_peer_lacks(
    node_b: tuple[Node, MemoryNetwork],
) -> None:
    b, network = node_b
    conn, hello = await _dial(network)
    b_epoch = hello.epoch
    await conn.send(encode_message(0, _data(1, "open")))
    session = await b.accept_session()
    ch = session.channel("a", "ch")
    assert await ch.recv() == "open"
    for i in range(5):
        await ch.send(i)
    got: list[int] = []
    while len(got) < 5:
        _, frames = await _next_frames(conn)
        got += [f.seq for f in _data_frames(frames)]
    assert got == [1, 2, 3, 4, 5]
    await conn.close()  # we "received" 1..5 but tell the node we hold only 1..2
    conn, hello = await _dial(network, recv_epoch=b_epoch, recv_seq=2)
    resent: list[tuple[int, object]] = []
    while len(resent) < 3:
        _, frames = await _next_frames(conn)
        resent += [(f.seq, codec.decode(f.payload)) for f in _data_frames(frames)]
    assert resent == [(3, 2), (4, 3), (5, 4)]
    # Claiming a frame the node never sent is refused.
    await conn.close()
    conn, _ = await _dial(network, recv_epoch=b_epoch, recv_seq=50)
    await _closed_by_node(conn)
    await session.close()


async def test_a_delayed_ack_does_not_wait_for_the_heart_beat() -> None:
    network = MemoryNetwork()
    slow_beat = replace(FAST, heartbeat_interval=30.0, heartbeat_timeout=60.0, ack_delay=0.01)
    transport = MemoryTransport(network, "b")
    async with Node(
        "b", listen="mem://b", peers={"a": None}, transport=transport, config=slow_beat
    ):
        conn, _ = await _dial(network)
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.05)  # the node's writer is now asleep until its next heart-beat
        await conn.send(encode_message(0, _data(1, "x")))
        t0 = loop.time()
        ack, frames = await _next_frames(conn)
        assert (ack, frames) == (1, [])
        assert loop.time() - t0 < 1.0 * time_factor()
        await conn.close()


async def test_datax_payload_follows_its_header_and_is_checked(
    node_b: tuple[Node, MemoryNetwork],
) -> None:
    b, network = node_b
    conn, _ = await _dial(network)
    names = encode_name("s") + encode_name("ch")
    blob = bytes(range(256)) * 200  # 50 KiB: within max_fragment and the window
    await conn.send(encode_message(0, [datax_header(1, FLAG_END | FLAG_RAW, names, len(blob))]))
    await conn.send(blob)
    session = await b.accept_session()
    ch = session.channel("a", "ch")
    assert await ch.recv() == blob
    # A payload of the wrong length breaks the link; the frame was not counted as received.
    await conn.send(encode_message(0, [datax_header(2, FLAG_END | FLAG_RAW, names, 100)]))
    await conn.send(bytes(99))
    await _closed_by_node(conn)
    conn, hello = await _dial(network)
    assert (hello.recv_epoch, hello.recv_seq) == (EPOCH, 1)
    # The link dropped between a header and its payload: resent whole, delivered once.
    await conn.send(encode_message(0, [datax_header(2, FLAG_END | FLAG_RAW, names, 3)]))
    await conn.close()
    conn, hello = await _dial(network)
    assert hello.recv_seq == 1
    await conn.send(encode_message(0, [datax_header(2, FLAG_END | FLAG_RAW, names, 3)]))
    await conn.send(b"abc")
    assert await ch.recv() == b"abc"
    await conn.close()


async def test_heart_beats_keep_their_pace_after_traffic(
    node_b: tuple[Node, MemoryNetwork],
) -> None:
    """The writer's one timer follows the heart-beat deadline as messages move it: after a
    burst, an idle link still hears from the node about every ``heartbeat_interval``."""
    _, network = node_b
    conn, _ = await _dial(network)
    loop = asyncio.get_running_loop()
    for seq in range(1, 21):  # each message the node answers moves its heart-beat deadline
        await conn.send(encode_message(0, _data(seq, seq)))
        await asyncio.sleep(FAST.heartbeat_interval / 10)
    heard: list[float] = []
    last = loop.time()
    while len(heard) < 5:
        ack, frames = await _next_frames(conn)
        if not frames:
            now = loop.time()
            heard.append(now - last)
            last = now
    assert ack == 20
    # Empty messages keep coming (delayed acks, then heart-beats), never as far apart as the
    # peer's heartbeat_timeout: none was lost to a timer left armed for an old time (the gaps
    # are about heartbeat_interval; the bound leaves a loaded machine room).
    assert max(heard) < FAST.heartbeat_timeout * time_factor()
