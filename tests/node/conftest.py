"""Fixtures for the node tests: a cluster of nodes over a chosen transport, with faults."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from p2pboost import certs
from p2pboost.certs import TLSConfig
from p2pboost.net._frames import FLAG_END, data_header, encode_name
from p2pboost.net.node import Node, NodeConfig
from p2pboost.net.transport import websocket_transport
from tests.node._faults import FaultyTransport
from transports.base import Transport
from transports.memory import MemoryNetwork, MemoryTransport

KiB = 1024

#: Short timeouts so fault tests finish in about a second each.
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


async def wait_until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``predicate`` (state of another node, which has no event to wait on) until true."""
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.005)


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
    kind = "memory"

    def __init__(self) -> None:
        self.network = MemoryNetwork()

    def transport(self, party: str, peers: Iterable[str]) -> Transport:
        return MemoryTransport(self.network, party, allowed_peers=peers)

    def listen_address(self, party: str) -> str:
        return f"mem://{party}"


class WebSocketFabric(Fabric):
    """Real TLS 1.3 WebSockets on loopback, certificates from a throw-away CA."""

    kind = "websocket"

    def __init__(self, federation: Path) -> None:
        self.federation = federation

    def transport(self, party: str, peers: Iterable[str]) -> Transport:
        return websocket_transport(
            TLSConfig.from_dir(self.federation / party),
            party_id=party,
            allowed_peers=peers,
            ping_interval=None,  # the node's own heart-beat is under test
            close_timeout=0.5,
        )

    def listen_address(self, party: str) -> str:
        return "wss://127.0.0.1:0"


@pytest.fixture(scope="session")
def node_federation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("node-federation")
    certs.init(out, ["a", "b", "c"])
    return out


@pytest.fixture(params=["memory", "websocket"])
def fabric(request: pytest.FixtureRequest, node_federation: Path) -> Fabric:
    """Each test using this runs over the in-memory network and over real TLS sockets."""
    if request.param == "memory":
        return MemoryFabric()
    return WebSocketFabric(node_federation)


@pytest.fixture
def memory_fabric() -> Fabric:
    return MemoryFabric()


class Cluster:
    """Nodes ``ids`` fully meshed over ``fabric``; each one's transport is a FaultyTransport."""

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
async def cluster(
    fabric: Fabric, ids: Iterable[str], config: NodeConfig = FAST, **overrides: object
) -> AsyncIterator[Cluster]:
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
        c = Cluster(nodes, transports)
        await c.connected()
        yield c


def inject_data(
    node: Node, peer: str, session: str, channel: str, payload: bytes, flags: int = FLAG_END
) -> None:
    """Make ``node`` send a raw DATA frame through its real link (sequenced, resent)."""
    link = node._links[peer]
    names = encode_name(session) + encode_name(channel)
    seq = link.alloc_seq()
    link.push(seq, (data_header(seq, flags, names, len(payload)), payload), None)
