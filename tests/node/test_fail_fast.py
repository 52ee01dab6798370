"""Mistakes that waiting cannot fix end a session within seconds, naming the cause.

Over real mutual-TLS WebSockets on loopback, with the default (production) reconnect timeout of
a minute: a peer whose certificate comes from another CA, a peer id misspelled in the config,
and a port where no TLS is spoken. Each used to be retried for the whole ``reconnect_timeout``
and then reported as "unreachable"; now the session fails once two dials in a row are refused
the same way, with :class:`~p2pboost.exceptions.PeerUnreachable` naming the peer, the cause and
what to check, and the log holds one line for the first refusal instead of one per retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from p2pboost import certs
from p2pboost.exceptions import PeerUnreachable, SessionClosed
from p2pboost.net.config import NodeConfig
from p2pboost.net.node import Node
from p2pboost.testing import FAST, MemoryFabric, local_federation, time_factor, wait_until

#: Production defaults: only the failure's own speed may make these tests fast.
CONFIG = NodeConfig()
assert CONFIG.reconnect_timeout >= 60.0

#: The acceptance bound: a bad setup fails within this many seconds.
WITHIN = 10.0


async def _first_error(node: Node, peer: str) -> tuple[BaseException, float]:
    """Open a session with ``peer`` and wait for what ends it; returns it and the seconds."""
    t0 = time.perf_counter()

    async def train() -> None:
        async with asyncio.timeout(WITHIN * time_factor()):
            async with node.session("train", peers=[peer]) as session:
                await session.channel(peer).recv()

    with pytest.raises(PeerUnreachable) as caught:
        await train()
    return caught.value, time.perf_counter() - t0


@asynccontextmanager
async def _listening(party: str, tls: Path, peer: str) -> AsyncIterator[Node]:
    async with Node(party, listen="127.0.0.1:0", peers={peer: None}, tls=tls, config=CONFIG) as n:
        yield n


async def test_a_peer_certified_by_another_ca(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="p2pboost")
    certs.init(tmp_path / "ours", ["a"])
    certs.init(tmp_path / "theirs", ["b"])
    async with _listening("b", tmp_path / "theirs" / "b", "a") as b:
        assert b.address is not None
        async with Node(
            "a", peers={"b": b.address}, tls=tmp_path / "ours" / "a", config=CONFIG
        ) as a:
            error, seconds = await _first_error(a, "b")
            with pytest.raises(PeerUnreachable):
                await a.wait_connected("b")
    assert seconds < WITHIN * time_factor()
    assert error.peer == "b"  # type: ignore[attr-defined]
    message = str(error)
    assert "cannot connect to party 'b'" in message
    assert "certificate rejected" in message
    assert "come from the federation's CA" in message
    # One INFO line for the first refusal; the retries go to DEBUG.
    info = [r for r in caplog.records if r.levelno == logging.INFO and "reach 'b'" in r.message]
    assert len(info) == 1, [r.message for r in info]


async def test_the_listening_side_logs_whom_it_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The party that waits (it listens) says, within seconds, that a dialing party was refused
    and why, instead of waiting out its reconnect timeout in silence."""
    caplog.set_level(logging.DEBUG, logger="p2pboost")
    certs.init(tmp_path / "ours", ["a"])
    certs.init(tmp_path / "theirs", ["b"])
    async with _listening("b", tmp_path / "theirs" / "b", "a") as b:
        assert b.address is not None
        async with Node(
            "a", peers={"b": b.address}, tls=tmp_path / "ours" / "a", config=CONFIG
        ) as a:
            await _first_error(a, "b")

        def refusals() -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.levelno == logging.WARNING and "refused a TLS handshake" in r.getMessage()
            ]

        await wait_until(lambda: bool(refusals()), within=WITHIN)
    (line,) = refusals()  # a dialed twice (two refusals end its session): one warning
    assert line.startswith("b: refused a TLS handshake from 127.0.0.1:")
    assert "does not trust our certificate" in line


async def test_a_misspelled_peer_id(tmp_path: Path) -> None:
    certs.init(tmp_path, ["a", "b"])
    async with _listening("b", tmp_path / "b", "a") as b:
        assert b.address is not None
        # The config says "bb" where the party is "b": the certificate names another party.
        async with Node("a", peers={"bb": b.address}, tls=tmp_path / "a", config=CONFIG) as a:
            error, seconds = await _first_error(a, "bb")
    assert seconds < WITHIN * time_factor()
    assert "the server's certificate is for party 'b', expected 'bb'" in str(error)
    assert "spelled as in its certificate" in str(error)


async def test_a_port_where_no_tls_is_spoken(tmp_path: Path) -> None:
    certs.init(tmp_path, ["a", "b"])

    async def plain_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain_http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Node(
            "a", peers={"b": f"wss://127.0.0.1:{port}"}, tls=tmp_path / "a", config=CONFIG
        ) as a:
            error, seconds = await _first_error(a, "b")
    finally:
        server.close()
        await server.wait_closed()
    assert seconds < WITHIN * time_factor()
    assert "TLS handshake with party 'b'" in str(error)


async def test_a_peer_that_is_merely_down_is_still_waited_for(tmp_path: Path) -> None:
    """Refused connections (nothing listening) heal when the peer starts: no early failure."""
    certs.init(tmp_path, ["a", "b"])
    with socket_reserved() as port:
        address = f"wss://127.0.0.1:{port}"
    async with Node("a", peers={"b": address}, tls=tmp_path / "a", config=CONFIG) as a:
        async with a.session("train", peers=["b"]) as session:
            waiting = asyncio.ensure_future(session.channel("b").recv())
            await asyncio.sleep(2.0)
            assert not waiting.done()  # still waiting: the peer may come up
            async with Node(
                "b", listen=f"127.0.0.1:{port}", peers={"a": None}, tls=tmp_path / "b"
            ) as b:
                async with b.session("train", peers=["a"]) as sb:
                    await sb.channel("a").send("hello")
                    assert await asyncio.wait_for(waiting, 10 * time_factor()) == "hello"


class socket_reserved:
    """A free loopback port (bound, then released on exit for the test to use); lower case
    because it reads as a context manager."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


async def test_an_abort_before_the_session_is_opened_fails_the_late_opener() -> None:
    """``a`` opens a session with ``b`` and gives up before ``b`` opens it: ``b`` must not wait
    forever for a party that has left (the ABORT used to be dropped)."""
    async with local_federation(MemoryFabric(), ["a", "b"], FAST) as c:
        before = c["b"].stats().peers["a"].wire_messages_received
        async with c["a"].session("train", peers=["b"]) as early:
            await early.abort("the guest's data failed to load")
        await wait_until(lambda: c["b"].stats().peers["a"].wire_messages_received > before)
        t0 = time.perf_counter()
        with pytest.raises(SessionClosed) as caught:
            await _recv_within(c["b"], "train", "a", 2.0 * time_factor())
        assert time.perf_counter() - t0 < 2.0 * time_factor()
        assert "aborted by peer 'a' before it was opened here" in str(caught.value)
        assert "the guest's data failed to load" in str(caught.value)
        # The next session of the same name is a new one: it works.
        async with (
            c["a"].session("train", peers=["b"]) as sa,
            c["b"].session("train", peers=["a"]) as sb,
        ):
            await sa.channel("b").send(1)
            assert await sb.channel("a").recv() == 1


async def _recv_within(node: Node, sid: str, peer: str, seconds: float) -> object:
    async with asyncio.timeout(seconds), node.session(sid, peers=[peer]) as session:
        return await session.channel(peer).recv()
