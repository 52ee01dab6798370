"""Fixtures for the node tests: each test runs over the in-memory network and real TLS sockets.

The federation kit itself (fabrics, ``local_federation``, fault injection) is
:mod:`p2pboost.testing`, public for users' simulations too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from p2pboost import certs
from p2pboost.net._frames import FLAG_END, data_header, encode_name
from p2pboost.net.node import Node
from p2pboost.testing import Fabric, MemoryFabric, WebSocketFabric


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


def inject_data(
    node: Node, peer: str, session: str, channel: str, payload: bytes, flags: int = FLAG_END
) -> None:
    """Make ``node`` send a raw DATA frame through its real link (sequenced, resent)."""
    link = node._links[peer]
    names = encode_name(session) + encode_name(channel)
    seq = link.alloc_seq()
    link.push(seq, (data_header(seq, flags, names, len(payload)), payload), None)
