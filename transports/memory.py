"""An in-process network with the real transport's semantics, plus fault injection.

:class:`MemoryTransport` implements :class:`p2pboost.transports.base.Transport` without sockets, so
the node, the protocols and their failure handling can be tested fast and deterministically. It
keeps the contract of the WebSocket transport:

* ``connect`` checks that the party listening at the address is the ``peer_id`` asked for
  (else :class:`~p2pboost.transports.errors.HandshakeError`); the server's handler receives
  connections whose ``peer_id`` is the connector's party id; a server may restrict which
  parties may connect (``allowed_peers``).
* Messages are whole ``bytes`` objects, delivered in order, each at most once and never in
  part. Each direction holds at most ``queue_size`` messages: ``send`` waits while the peer
  does not read (back-pressure).
* ``max_message_bytes``: the sender refuses a larger message with
  :class:`~p2pboost.transports.errors.FrameTooLarge` (the link stays up); a receiver with a smaller
  limit than its sender closes the link and raises ``FrameTooLarge``, as a WebSocket does.
* After a graceful ``close()`` by the peer, messages already sent are still delivered, then
  ``receive`` raises :class:`~p2pboost.transports.errors.TransportError`; after a local ``close()``
  or a failure, ``send`` and ``receive`` raise it at once.

Faults (all synchronous, so a test can inject them from anywhere):

* latency: :attr:`MemoryNetwork.delay` (every message on every link) plus
  :attr:`MemoryConnection.delay` (messages this end sends). A delayed message is *in flight*
  until its delivery time: a drop in that window loses it.
* :meth:`MemoryConnection.drop` breaks the link; both ends see ``TransportError`` on their next
  (or current) ``send``/``receive``; every buffered or in-flight message is lost.
* :meth:`MemoryConnection.drop_after` breaks the link in the middle of a later ``send``: that
  message is lost entirely (never delivered partially or twice).
* :meth:`MemoryNetwork.drop_all` breaks every live link (a network outage).
* :meth:`MemoryNetwork.refuse` makes an address refuse connections, optionally for a number
  of seconds (the listener keeps running, so a reconnect loop can be tested), and
  :meth:`MemoryNetwork.accept` lifts it.

Addresses are plain strings such as ``"mem://guest"``. An address ending in ``":0"`` asks for a
fresh unique address, like port 0; :attr:`Listener.address` tells which one was chosen.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable

from .base import Connection, ConnectionHandler, Listener, Transport
from .errors import (
    FrameTooLarge,
    HandshakeError,
    TransportConfigError,
    TransportError,
    TransportUsageError,
)

__all__ = ["MemoryConnection", "MemoryListener", "MemoryNetwork", "MemoryTransport"]

logger = logging.getLogger("p2pboost.transport.memory")

#: Default bound of each direction's buffer, in messages.
DEFAULT_QUEUE_SIZE = 16
#: Default largest message, in bytes (matches the WebSocket transport's default).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

ErrorHook = Callable[[Exception], None]


def _fresh(error: TransportError) -> TransportError:
    """A new exception like ``error``: re-raising one instance would pile up tracebacks."""
    return type(error)(*error.args)


class _Pipe:
    """One direction of a link: a bounded FIFO of ``(deliver_at, message)``.

    ``write_error`` is raised to the writer, ``read_error`` to the reader once the buffer is
    drained (a graceful end of stream) or at once if the buffer was discarded (a failure).
    """

    def __init__(self, capacity: int) -> None:
        self.items: deque[tuple[float, bytes]] = deque()
        self.capacity = capacity
        self.write_error: TransportError | None = None
        self.read_error: TransportError | None = None
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()

    def wake(self) -> None:
        self._readable.set()
        self._writable.set()

    async def put(self, deliver_at: float, message: bytes) -> None:
        while True:
            if self.write_error is not None:
                raise _fresh(self.write_error)
            if len(self.items) < self.capacity:
                break
            self._writable.clear()
            await self._writable.wait()
        self.items.append((deliver_at, message))
        self._readable.set()

    async def get(self) -> bytes:
        loop = asyncio.get_running_loop()
        while True:
            if self.items:
                deliver_at, message = self.items[0]
                wait = deliver_at - loop.time()
                if wait <= 0:
                    self.items.popleft()
                    self._writable.set()
                    return message
                # Still in flight: wait for its delivery time, then look again. A drop in the
                # meantime empties the buffer and wakes us: the message is lost, as on a wire.
                self._readable.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._readable.wait()
                continue
            if self.read_error is not None:
                raise _fresh(self.read_error)
            self._readable.clear()
            await self._readable.wait()

    def end(self, reader_error: TransportError, writer_error: TransportError) -> None:
        """Graceful end: the reader drains what was sent, then gets ``reader_error``."""
        self.write_error = self.write_error or writer_error
        self.read_error = self.read_error or reader_error
        self.wake()

    def discard(self, reader_error: TransportError, writer_error: TransportError) -> None:
        """Failure or reader gone: buffered messages are lost; both ends fail from now on."""
        self.items.clear()
        self.write_error = self.write_error or writer_error
        self.read_error = self.read_error or reader_error
        self.wake()


class MemoryConnection(Connection):
    """One end of an in-memory link. Create links with :meth:`MemoryTransport.connect`."""

    def __init__(
        self,
        network: MemoryNetwork,
        local_id: str,
        peer_id: str,
        tx: _Pipe,
        rx: _Pipe,
        max_message_bytes: int,
    ) -> None:
        self.peer_id = peer_id
        self.local_id = local_id
        #: Extra latency, in seconds, of each message this end sends (fault injection).
        self.delay = 0.0
        self._network = network
        self._tx = tx
        self._rx = rx
        self._max = max_message_bytes
        self._peer: MemoryConnection | None = None
        self._receiving = False
        self._drop_countdown: int | None = None
        self._drop_raises = True

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<MemoryConnection {self.local_id}->{self.peer_id} {state}>"

    @property
    def closed(self) -> bool:
        return self._tx.write_error is not None

    async def send(self, message: bytes) -> None:
        if len(message) > self._max:
            raise FrameTooLarge(
                f"message of {len(message)} bytes exceeds the limit of {self._max} bytes"
            )
        if self._drop_countdown is not None:
            self._drop_countdown -= 1
            if self._drop_countdown <= 0:
                self._drop_countdown = None
                self.drop("link dropped while a message was being sent (fault injection)")
                if self._drop_raises:
                    raise _fresh(self._tx.write_error or TransportError("link dropped"))
                return
        peer = self._peer
        if peer is not None and len(message) > peer._max:
            self._oversize_at_peer(len(message), peer._max)
        delay = self._network.delay + self.delay
        loop = asyncio.get_running_loop()
        await self._tx.put(loop.time() + delay if delay > 0 else 0.0, bytes(message))

    async def receive(self) -> bytes:
        # Like a WebSocket: one reader at a time, so a test double cannot hide a node bug.
        if self._receiving:
            raise TransportUsageError("receive() called while another receive() waits")
        self._receiving = True
        try:
            return await self._rx.get()
        finally:
            self._receiving = False

    async def close(self) -> None:
        self._close_now()

    def _close_now(self) -> None:
        if self.closed:
            return
        self._tx.end(
            TransportError(f"peer {self.local_id!r} closed the connection"),
            TransportError("connection closed locally"),
        )
        self._rx.discard(
            TransportError("connection closed locally"),
            TransportError(f"peer {self.local_id!r} closed the connection"),
        )
        self._forget_link()

    def _forget_link(self) -> None:
        self._network._forget(self)
        if self._peer is not None:
            self._network._forget(self._peer)

    # -- fault injection ----------------------------------------------------------------------

    def drop(self, reason: str = "link dropped (fault injection)") -> None:
        """Break the link now: both ends fail, buffered and in-flight messages are lost."""
        for pipe in (self._tx, self._rx):
            pipe.discard(TransportError(reason), TransportError(reason))
        self._forget_link()

    def drop_after(self, messages: int, *, sender_notices: bool = True) -> None:
        """Break the link during the ``messages``-th next :meth:`send` from this end.

        That message is lost entirely. With ``sender_notices`` the interrupted ``send`` raises
        :class:`TransportError`; without, it returns as if the bytes had left (they were lost on
        the wire), and only the next operation fails, the harder case for a session layer.
        """
        if messages < 1:
            raise ValueError("messages must be >= 1")
        self._drop_countdown = messages
        self._drop_raises = sender_notices

    def _oversize_at_peer(self, size: int, limit: int) -> None:
        self._rx.discard(
            TransportError("connection closed: peer refused an oversized message"),
            TransportError("connection closed"),
        )
        self._tx.discard(
            FrameTooLarge(f"peer sent a message of {size} bytes, over the limit of {limit}"),
            TransportError(f"peer {self.peer_id!r} refused a message of {size} bytes"),
        )
        self._forget_link()
        raise TransportError(f"peer {self.peer_id!r} refused a message of {size} bytes")


class MemoryListener(Listener):
    """A running in-memory server."""

    def __init__(
        self,
        network: MemoryNetwork,
        address: str,
        transport: MemoryTransport,
        handler: ConnectionHandler,
    ) -> None:
        self.address = address
        self.transport = transport
        self._network = network
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[MemoryConnection] = set()
        self._closed = False

    def _accept(self, connection: MemoryConnection) -> None:
        self._connections.add(connection)
        task = asyncio.get_running_loop().create_task(self._run(connection))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, connection: MemoryConnection) -> None:
        try:
            await self._handler(connection)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.transport._report(
                TransportError(f"handler for peer {connection.peer_id!r} failed: {exc!r}")
            )
        finally:
            self._connections.discard(connection)
            await connection.close()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._network._unregister(self.address, self)
        for connection in list(self._connections):
            await connection.close()
        if self._tasks:
            _done, pending = await asyncio.wait(set(self._tasks), timeout=5.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)


class MemoryNetwork:
    """The registry of listening addresses, live links and injected faults."""

    def __init__(self, *, delay: float = 0.0) -> None:
        #: Latency, in seconds, added to every message on every link.
        self.delay = delay
        self._listeners: dict[str, MemoryListener] = {}
        self._refused: dict[str, tuple[float | None, str]] = {}
        self._links: set[MemoryConnection] = set()
        self._counter = itertools.count(1)

    # -- fault injection ----------------------------------------------------------------------

    def refuse(
        self,
        address: str,
        seconds: float | None = None,
        *,
        reason: str = "connection refused (fault injection)",
    ) -> None:
        """Refuse connections to ``address`` (for ``seconds``, or until :meth:`accept`)."""
        until = None if seconds is None else asyncio.get_running_loop().time() + seconds
        self._refused[address] = (until, reason)

    def accept(self, address: str) -> None:
        """Lift a :meth:`refuse`."""
        self._refused.pop(address, None)

    def drop_all(self, reason: str = "network outage (fault injection)") -> None:
        """Break every live link."""
        for connection in list(self._links):
            connection.drop(reason)

    def connections(self, party_id: str | None = None) -> list[MemoryConnection]:
        """Live connection ends, optionally only those owned by ``party_id``."""
        return [
            c for c in self._links if not c.closed and (party_id is None or c.local_id == party_id)
        ]

    # -- used by MemoryTransport --------------------------------------------------------------

    def _register(
        self, address: str, listener_factory: Callable[[str], MemoryListener]
    ) -> MemoryListener:
        if address.endswith(":0"):
            address = f"{address[:-2]}:{next(self._counter)}"
        if address in self._listeners:
            raise TransportError(f"address already in use: {address}")
        listener = listener_factory(address)
        self._listeners[address] = listener
        return listener

    def _unregister(self, address: str, listener: MemoryListener) -> None:
        if self._listeners.get(address) is listener:
            del self._listeners[address]

    def _lookup(self, address: str) -> MemoryListener:
        refused = self._refused.get(address)
        if refused is not None:
            until, reason = refused
            if until is None or asyncio.get_running_loop().time() < until:
                raise TransportError(f"cannot connect to {address}: {reason}")
            del self._refused[address]
        listener = self._listeners.get(address)
        if listener is None:
            raise TransportError(f"cannot connect to {address}: connection refused")
        return listener

    def _track(self, *connections: MemoryConnection) -> None:
        self._links.update(connections)

    def _forget(self, connection: MemoryConnection) -> None:
        self._links.discard(connection)


class MemoryTransport(Transport):
    """In-memory transport for party ``party_id`` on ``network``.

    ``allowed_peers`` (server side): parties allowed to connect; ``None`` allows any. A refused
    connection raises :class:`HandshakeError` at the connector and is reported at the server
    through ``on_error`` (default: a ``logging`` warning on ``p2pboost.transport.memory``).
    """

    def __init__(
        self,
        network: MemoryNetwork,
        party_id: str,
        *,
        allowed_peers: Iterable[str] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        on_error: ErrorHook | None = None,
    ) -> None:
        if max_message_bytes < 1 or queue_size < 1:
            raise TransportConfigError("max_message_bytes and queue_size must be >= 1")
        self.network = network
        self.party_id = party_id
        self.allowed_peers = None if allowed_peers is None else frozenset(allowed_peers)
        self.max_message_bytes = max_message_bytes
        self.queue_size = queue_size
        self._on_error = on_error

    def _report(self, error: Exception) -> None:
        logger.warning("%s: %s", self.party_id, error)
        if self._on_error is not None:
            self._on_error(error)

    async def connect(self, address: str, *, peer_id: str) -> MemoryConnection:
        await asyncio.sleep(2 * self.network.delay)  # one round trip, and a scheduling point
        listener = self.network._lookup(address)
        server = listener.transport
        if server.party_id != peer_id:
            raise HandshakeError(f"{address} is party {server.party_id!r}, expected {peer_id!r}")
        if server.allowed_peers is not None and self.party_id not in server.allowed_peers:
            reason = f"party {self.party_id!r} is not an allowed peer"
            server._report(HandshakeError(f"refused a client: {reason}"))
            raise HandshakeError(f"party {peer_id!r} at {address} refused the connection: {reason}")
        up, down = _Pipe(self.queue_size), _Pipe(server.queue_size)
        client = MemoryConnection(
            self.network, self.party_id, peer_id, up, down, self.max_message_bytes
        )
        accepted = MemoryConnection(
            self.network, peer_id, self.party_id, down, up, server.max_message_bytes
        )
        client._peer, accepted._peer = accepted, client
        self.network._track(client, accepted)
        listener._accept(accepted)
        return client

    async def serve(self, address: str, handler: ConnectionHandler) -> MemoryListener:
        return self.network._register(
            address, lambda resolved: MemoryListener(self.network, resolved, self, handler)
        )
