"""The node is where the transports' exceptions become p2pboost's, with p2pboost's diagnoses."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from p2pboost import certs, exceptions
from p2pboost.net.node import Node
from p2pboost.testing import FAST, wait_until
from p2pboost.transports import errors
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport


async def test_a_taken_listen_address_raises_the_library_transport_error() -> None:
    network = MemoryNetwork()
    async with Node(
        "b", listen="mem://b", peers={"a": None}, transport=MemoryTransport(network, "b")
    ):
        second = Node(
            "b", listen="mem://b", peers={"a": None}, transport=MemoryTransport(network, "b")
        )
        with pytest.raises(exceptions.TransportError, match="already in use") as caught:
            await second.start()
        assert not isinstance(caught.value, errors.TransportError)


async def test_a_malformed_listen_address_is_a_config_error(node_federation: Path) -> None:
    node = Node("b", listen="http://127.0.0.1:0", peers={"a": None}, tls=node_federation / "b")
    with pytest.raises(exceptions.ConfigError, match=r"cannot listen on 'http://127\.0\.0\.1:0'"):
        await node.start()


async def test_tls_of_another_party_is_a_config_error(node_federation: Path) -> None:
    node = Node("b", listen="127.0.0.1:0", peers={"a": None}, tls=node_federation / "a")
    with pytest.raises(exceptions.ConfigError, match="is for party 'a', not 'b'"):
        await node.start()


def _expired_party(federation: Path, party: str, out: Path) -> certs.TLSConfig:
    """``party`` with a certificate from the federation's CA that expired a week ago."""
    ca = certs.load_ca(federation / "ca")
    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    cert = certs.issue_certificate(ca, party, key.public_key(), days=23, not_before=start)
    out.mkdir(parents=True)
    (out / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (out / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    shutil.copy(federation / "ca" / "ca.pem", out / "ca.pem")
    return certs.TLSConfig.from_dir(out)


async def test_a_refused_certificate_is_explained_where_the_node_dials(
    node_federation: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="p2pboost.net.node")
    expired = _expired_party(node_federation, "a", tmp_path / "a")
    async with Node(
        "b", listen="127.0.0.1:0", peers={"a": None}, tls=node_federation / "b", config=FAST
    ) as b:
        assert b.address is not None
        async with Node("a", peers={"b": b.address}, tls=expired, config=FAST):
            await wait_until(lambda: "cannot reach 'b'" in caplog.text)
    line = next(r.getMessage() for r in caplog.records if "cannot reach 'b'" in r.getMessage())
    assert "refused our certificate" in line
    assert "expired on" in line  # p2pboost's check of its own certificate, added at the boundary
