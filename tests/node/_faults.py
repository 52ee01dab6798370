"""A transport wrapper that injects faults into any transport (memory or WebSocket).

The node must survive connections that die mid-message, links that go silent without closing,
and garbage from an authenticated peer, whatever the transport under it. Wrapping the transport
lets one test drive those faults identically over the in-memory network and real TLS sockets.
"""

from __future__ import annotations

import asyncio
import contextlib

from transports.base import Connection, ConnectionHandler, Listener, Transport
from transports.errors import TransportError

__all__ = ["FaultyConnection", "FaultyTransport"]


class FaultyConnection(Connection):
    """Wraps a connection; :meth:`kill` loses everything in flight, :attr:`silent` swallows."""

    def __init__(self, inner: Connection, owner: FaultyTransport) -> None:
        self.inner = inner
        self.peer_id = inner.peer_id
        self._owner = owner
        self._killed = False
        self._kill_after: int | None = None
        self._closers: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        return self._killed or self.inner.closed

    async def send(self, message: bytes) -> None:
        if self._killed:
            raise TransportError("connection killed (fault injection)")
        if self._kill_after is not None:
            self._kill_after -= 1
            if self._kill_after <= 0:
                self.kill()  # this message is lost, and the sender does not notice
                return
        if self._owner.silent:
            return  # a dead link that does not say so
        await self.inner.send(message)

    async def receive(self) -> bytes:
        while True:
            if self._killed:
                raise TransportError("connection killed (fault injection)")
            message = await self.inner.receive()
            if self._killed:
                raise TransportError("connection killed (fault injection)")
            if not self._owner.silent:
                return message

    async def close(self) -> None:
        self._killed = True
        await self.inner.close()

    async def send_raw(self, message: bytes) -> None:
        """Bypass the node: put ``message`` on the wire as it is."""
        await self.inner.send(message)

    def kill(self) -> None:
        """Abort: whatever was sent or is in flight is lost; both ends see the link fail."""
        self._killed = True
        drop = getattr(self.inner, "drop", None)
        if drop is not None:
            drop()
        else:
            task = asyncio.get_running_loop().create_task(self._close_inner())
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    def kill_after(self, sends: int) -> None:
        """Kill the link during the ``sends``-th next send (that message is lost)."""
        self._kill_after = sends

    async def _close_inner(self) -> None:
        with contextlib.suppress(Exception):
            await self.inner.close()


class _FaultyListener(Listener):
    def __init__(self, inner: Listener) -> None:
        self.inner = inner
        self.address = inner.address

    async def close(self) -> None:
        await self.inner.close()


class FaultyTransport(Transport):
    """Wraps ``inner``; remembers every live connection of this party for fault injection."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.connections: list[FaultyConnection] = []
        #: While True, this party's messages vanish in both directions without an error.
        self.silent = False

    def live(self) -> list[FaultyConnection]:
        return [c for c in self.connections if not c.closed]

    def kill_all(self) -> int:
        live = self.live()
        for conn in live:
            conn.kill()
        return len(live)

    async def connect(self, address: str, *, peer_id: str) -> Connection:
        conn = FaultyConnection(await self.inner.connect(address, peer_id=peer_id), self)
        self.connections.append(conn)
        return conn

    async def serve(self, address: str, handler: ConnectionHandler) -> Listener:
        async def wrapped(inner: Connection) -> None:
            conn = FaultyConnection(inner, self)
            self.connections.append(conn)
            await handler(conn)

        return _FaultyListener(await self.inner.serve(address, wrapped))
