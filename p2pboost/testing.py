"""The federation kit: every party's node on one event loop, for tests and simulations.

Trying a federation should not need certificates, processes or a network. This module builds
fully meshed :class:`~p2pboost.net.node.Node` objects in one process, over the in-memory
transport (:class:`MemoryFabric`) or over real mutual-TLS WebSockets on loopback
(:class:`WebSocketFabric`), each wrapped in a :class:`FaultyTransport` so that a test or a
simulation can kill links, make a party silent or inject garbage::

    from p2pboost.testing import MemoryFabric, local_federation

    async with local_federation(MemoryFabric(), ["guest", "host"]) as fed:
        async with fed["host"].session("train", peers=["guest"]) as host_session: ...

The protocols are the real ones (node, codec, flow control, the federated algorithms); only
the bytes travel in memory. The library's own tests use this kit; so can users' simulations.

Wall-clock bounds in tests scale with :func:`time_factor` (``P2PBOOST_TIME_FACTOR``, default
1): on a slow or loaded machine raise the factor instead of loosening a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from pathlib import Path

from p2pboost import certs
from p2pboost.certs import TLSConfig
from p2pboost.net.config import NodeConfig
from p2pboost.net.node import Node
from p2pboost.net.transport import websocket_transport
from p2pboost.transports.base import Connection, ConnectionHandler, Listener, Transport
from p2pboost.transports.errors import TransportError
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport

__all__ = [
    "FAST",
    "TRAINING",
    "Fabric",
    "FaultyConnection",
    "FaultyTransport",
    "LocalFederation",
    "MemoryFabric",
    "WebSocketFabric",
    "local_federation",
    "time_factor",
    "wait_until",
]

KiB = 1024

#: Short timeouts, so that tests of faults finish in about a second each.
FAST = NodeConfig(
    window=256 * KiB,
    max_fragment=64 * KiB,
    heartbeat_interval=0.05,
    heartbeat_timeout=0.4,
    reconnect_timeout=1.5,
    connect_timeout=1.0,
    backoff_initial=0.01,
    backoff_max=0.1,
    close_timeout=0.5,
)
#: :data:`FAST` with heart-beats relaxed, so that training's CPU bursts (every party on the
#: same few cores) never look like a dead link.
TRAINING = replace(
    FAST,
    heartbeat_interval=0.2,
    heartbeat_timeout=5.0,
    reconnect_timeout=10.0,
    connect_timeout=2.0,
    close_timeout=2.0,
)


def time_factor() -> float:
    """How much slower than a quiet two-core machine this one is taken to be.

    ``P2PBOOST_TIME_FACTOR`` (default 1): every wall-clock bound of the test suite is
    multiplied by it, so a loaded CI machine can be given room without editing a test.
    """
    raw = os.environ.get("P2PBOOST_TIME_FACTOR", "1")
    try:
        factor = float(raw)
    except ValueError:
        raise ValueError(f"P2PBOOST_TIME_FACTOR must be a number, got {raw!r}") from None
    if not (math.isfinite(factor) and factor >= 1):
        raise ValueError(f"P2PBOOST_TIME_FACTOR must be at least 1, got {raw!r}")
    return factor


async def wait_until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``predicate`` (state of another node, which has no event to wait on) until true;
    ``within`` seconds (times :func:`time_factor`) at most."""
    async with asyncio.timeout(within * time_factor()):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.005)


# -- networks ------------------------------------------------------------------------------------


class Fabric(ABC):
    """How to build transports and listen addresses for one kind of network."""

    kind = "abstract"

    @abstractmethod
    def transport(self, party: str, peers: Iterable[str]) -> Transport:
        """A transport for ``party`` that accepts ``peers``."""

    @abstractmethod
    def listen_address(self, party: str) -> str:
        """Where ``party`` listens on this network."""


class MemoryFabric(Fabric):
    """Parties in one process, bytes handed over in memory (no TLS, no sockets)."""

    kind = "memory"

    def __init__(self) -> None:
        self.network = MemoryNetwork()

    def transport(self, party: str, peers: Iterable[str]) -> Transport:
        return MemoryTransport(self.network, party, allowed_peers=peers)

    def listen_address(self, party: str) -> str:
        return f"mem://{party}"


class WebSocketFabric(Fabric):
    """Real TLS 1.3 WebSockets on loopback, with the certificates in ``federation``
    (one directory per party, as :func:`p2pboost.certs.init` writes; see :meth:`create`)."""

    kind = "websocket"

    def __init__(self, federation: Path) -> None:
        self.federation = federation

    @classmethod
    def create(cls, directory: str | os.PathLike[str], parties: Iterable[str]) -> WebSocketFabric:
        """A throw-away CA and a certificate for every party, in ``directory``."""
        certs.init(directory, list(parties))
        return cls(Path(directory))

    def transport(self, party: str, peers: Iterable[str]) -> Transport:
        return websocket_transport(
            TLSConfig.from_dir(self.federation / party),
            party_id=party,
            allowed_peers=peers,
            ping_interval=None,  # the node sends its own heart-beats
            close_timeout=0.5,
        )

    def listen_address(self, party: str) -> str:
        return "wss://127.0.0.1:0"


# -- a federation --------------------------------------------------------------------------------


class LocalFederation:
    """Nodes fully meshed over one fabric; each one's transport is a :class:`FaultyTransport`."""

    def __init__(self, nodes: dict[str, Node], transports: dict[str, FaultyTransport]) -> None:
        self.nodes = nodes
        self.transports = transports

    def __getitem__(self, party: str) -> Node:
        return self.nodes[party]

    async def connected(self) -> None:
        """Wait until every link is up."""
        await wait_until(
            lambda: all(p.connected for n in self.nodes.values() for p in n.stats().peers.values())
        )


@contextlib.asynccontextmanager
async def local_federation(
    fabric: Fabric, ids: Iterable[str], config: NodeConfig = FAST, **overrides: object
) -> AsyncIterator[LocalFederation]:
    """Start a node for every party of ``ids`` (``config`` with ``overrides``), wait until
    every link is up, and stop them all on exit."""
    ids = sorted(ids)
    cfg = replace(config, **overrides)  # type: ignore[arg-type]
    nodes: dict[str, Node] = {}
    transports: dict[str, FaultyTransport] = {}
    async with contextlib.AsyncExitStack() as stack:
        for party in reversed(ids):  # listeners first: the smaller id dials the larger
            others = [p for p in ids if p != party]
            peers = {p: (nodes[p].address if p > party else None) for p in others}
            transport = transports[party] = FaultyTransport(fabric.transport(party, others))
            listen = fabric.listen_address(party) if any(p < party for p in others) else None
            node = Node(party, listen=listen, peers=peers, transport=transport, config=cfg)
            nodes[party] = await stack.enter_async_context(node)
        fed = LocalFederation(nodes, transports)
        await fed.connected()
        yield fed


# -- fault injection -----------------------------------------------------------------------------
# A node must survive connections that die mid-message, links that go silent without closing,
# and garbage from an authenticated peer, whatever the transport under it. Wrapping the
# transport lets one test drive those faults identically in memory and over real TLS sockets.


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
