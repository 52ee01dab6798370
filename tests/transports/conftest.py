"""Fixtures shared by the transport tests: a throw-away federation and a harness per transport.

``federation`` is made once per test session with :mod:`p2pboost.certs` (a CA and parties
``guest``, ``host1``, ``host2``), so the TLS tests run against the same certificates users get.
``harness`` is parametrised over both transports so the conformance suite runs on each.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from p2pboost import certs
from p2pboost.net.transport import websocket_transport
from p2pboost.transports.base import Connection, Listener, Transport
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport

PARTIES = ("guest", "host1", "host2")


@pytest.fixture(scope="session")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory with ``ca/`` and one directory per party, as ``p2pboost certs init`` writes."""
    out = tmp_path_factory.mktemp("federation")
    certs.init(out, PARTIES)
    return out


class Harness(ABC):
    """Builds transports of one kind and runs a server that hands out accepted connections."""

    kind: str
    listen_address: str

    @abstractmethod
    def transport(
        self,
        party: str,
        *,
        allowed_peers: Iterable[str] | None = None,
        max_message_bytes: int = 1 << 20,
        on_error: Callable[[Exception], None] | None = None,
    ) -> Transport:
        """A transport for ``party`` with the given limits and error hook."""

    @asynccontextmanager
    async def server(
        self, party: str = "host1", **kwargs: Any
    ) -> AsyncIterator[tuple[Listener, asyncio.Queue[Connection]]]:
        """A listener whose handler queues every accepted connection and keeps it open."""
        accepted: asyncio.Queue[Connection] = asyncio.Queue()
        stop = asyncio.Event()

        async def handler(connection: Connection) -> None:
            await accepted.put(connection)
            await stop.wait()

        listener = await self.transport(party, **kwargs).serve(self.listen_address, handler)
        try:
            yield listener, accepted
        finally:
            stop.set()
            await listener.close()

    @asynccontextmanager
    async def pair(
        self, server_kwargs: dict[str, Any] | None = None, **client_kwargs: Any
    ) -> AsyncIterator[tuple[Connection, Connection]]:
        """A connected (client ``guest``, server ``host1``) pair of connection ends."""
        async with self.server("host1", **(server_kwargs or {})) as (listener, accepted):
            client = await self.transport("guest", **client_kwargs).connect(
                listener.address, peer_id="host1"
            )
            server = await asyncio.wait_for(accepted.get(), 5)
            try:
                yield client, server
            finally:
                await client.close()


class MemoryHarness(Harness):
    kind = "memory"
    listen_address = "mem://host1:0"

    def __init__(self) -> None:
        self.network = MemoryNetwork()

    def transport(
        self,
        party: str,
        *,
        allowed_peers: Iterable[str] | None = None,
        max_message_bytes: int = 1 << 20,
        on_error: Callable[[Exception], None] | None = None,
    ) -> Transport:
        return MemoryTransport(
            self.network,
            party,
            allowed_peers=allowed_peers,
            max_message_bytes=max_message_bytes,
            queue_size=4,
            on_error=on_error,
        )


class WebSocketHarness(Harness):
    kind = "websocket"
    listen_address = "127.0.0.1:0"

    def __init__(self, federation: Path) -> None:
        self.federation = federation

    def transport(
        self,
        party: str,
        *,
        allowed_peers: Iterable[str] | None = None,
        max_message_bytes: int = 1 << 20,
        on_error: Callable[[Exception], None] | None = None,
    ) -> Transport:
        # Small water marks, so that back-pressure shows after a few messages.
        return websocket_transport(
            certs.TLSConfig.from_dir(self.federation / party),
            party_id=party,
            allowed_peers=allowed_peers,
            max_message_bytes=max_message_bytes,
            max_queue=4,
            write_limit=1 << 16,
            on_error=on_error,
        )


@pytest.fixture(params=["memory", "websocket"])
def harness(request: pytest.FixtureRequest, federation: Path) -> Harness:
    if request.param == "memory":
        return MemoryHarness()
    return WebSocketHarness(federation)
