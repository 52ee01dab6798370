"""Mutual TLS over real sockets: every kind of refused client fails clearly on both sides.

Each case asserts the connecting side's exception (type and message) and the error the server
reports through ``on_error``, and that the server goes on serving good clients. The transport
raises its own exceptions (:mod:`p2pboost.transports.errors`); where p2pboost adds a diagnosis
(a check of our own certificate), the case asserts it on the translated exception
(:func:`p2pboost.net.transport.translate_error`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from p2pboost import certs, exceptions
from p2pboost.exceptions import ConfigError
from p2pboost.net.transport import peer_party_id, translate_error, websocket_transport
from p2pboost.transports.base import Connection
from p2pboost.transports.errors import HandshakeError, TransportConfigError, TransportError
from p2pboost.transports.websocket import (
    PARTY_HEADER,
    PEER_HEADER,
    WebSocketConnection,
    WebSocketTransport,
)


def _write_party(
    directory: Path, ca_file: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> certs.TLSConfig:
    directory.mkdir(parents=True)
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    shutil.copy(ca_file, directory / "ca.pem")
    return certs.TLSConfig.from_dir(directory)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another federation (another CA) with a party called ``guest`` too."""
    out = tmp_path_factory.mktemp("foreign")
    certs.init(out, ["guest", "host1"])
    return out


@pytest.fixture(scope="module")
def expired(federation: Path, tmp_path_factory: pytest.TempPathFactory) -> certs.TLSConfig:
    """``guest`` with a certificate from the right CA whose validity ended a week ago."""
    ca = certs.load_ca(federation / "ca")
    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    cert = certs.issue_certificate(ca, "guest", key.public_key(), days=23, not_before=start)
    return _write_party(
        tmp_path_factory.mktemp("expired") / "guest", federation / "ca" / "ca.pem", key, cert
    )


@pytest.fixture(scope="module")
def nameless(federation: Path, tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A client context with a CA-signed certificate that names no party."""
    ca = certs.load_ca(federation / "ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "guest")]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    config = _write_party(
        tmp_path_factory.mktemp("nameless") / "x", federation / "ca" / "ca.pem", key, cert
    )
    return certs.client_context(config)


def tls(federation: Path, party: str) -> certs.TLSConfig:
    return certs.TLSConfig.from_dir(federation / party)


class Server:
    """host1 listening on loopback, recording what it reports and whom it accepts."""

    def __init__(self) -> None:
        self.errors: list[Exception] = []
        self.accepted: list[str] = []
        self.address = ""

    def reported(self) -> str:
        assert self.errors, "the server reported nothing"
        assert all(isinstance(e, HandshakeError) for e in self.errors)
        return " | ".join(map(str, self.errors))

    async def handler(self, connection: Connection) -> None:
        self.accepted.append(connection.peer_id)
        await connection.send(await connection.receive())

    async def settle(self) -> None:
        # The server learns of a failed handshake when the client's bytes (or its hang-up)
        # arrive; give the loop a moment to run that.
        for _ in range(100):
            if self.errors:
                return
            await asyncio.sleep(0.01)


@pytest.fixture
async def server(federation: Path) -> AsyncIterator[Server]:
    state = Server()
    transport = websocket_transport(
        tls(federation, "host1"), allowed_peers={"guest", "host2"}, on_error=state.errors.append
    )
    listener = await transport.serve("127.0.0.1:0", state.handler)
    state.address = listener.address
    try:
        yield state
        # Whatever was refused before, a good client still gets through.
        good = await websocket_transport(tls(federation, "guest")).connect(
            listener.address, peer_id="host1"
        )
        await good.send(b"ping")
        assert await good.receive() == b"ping"
        await good.close()
        assert state.accepted[-1] == "guest"
    finally:
        await listener.close()


def raw_client_context(
    ca_file: Path, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_verify_locations(ca_file)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


async def test_good_client_gets_the_party_ids_from_certificates(
    server: Server, federation: Path
) -> None:
    connection = await websocket_transport(tls(federation, "host2")).connect(
        server.address, peer_id="host1"
    )
    await connection.send(b"hi")
    assert await connection.receive() == b"hi"
    assert connection.peer_id == "host1"
    assert server.accepted == ["host2"]
    assert isinstance(connection, WebSocketConnection)
    ws = connection._ws  # the library connection underneath: no extension (no compression)
    assert ws.protocol.extensions == []
    assert ws.request is not None
    assert "Sec-WebSocket-Extensions" not in ws.request.headers
    await connection.close()
    assert server.errors == []


async def test_certificate_from_another_ca_is_refused(
    server: Server, federation: Path, foreign: Path
) -> None:
    # A consistent but foreign party, trusting our CA so that only the server can refuse.
    config = certs.TLSConfig(
        federation / "ca" / "ca.pem", foreign / "guest" / "cert.pem", foreign / "guest" / "key.pem"
    )
    with pytest.raises(HandshakeError, match="refused the connection") as caught:
        await websocket_transport(config).connect(server.address, peer_id="host1")
    assert caught.value.certificate_refused
    explained = translate_error(caught.value, tls=config)
    assert isinstance(explained, exceptions.HandshakeError)
    assert "not issued by the CA" in str(explained)
    await server.settle()
    assert "unable to get local issuer certificate" in server.reported()
    assert server.accepted == []


async def test_server_with_a_certificate_from_another_ca_is_refused(
    server: Server, foreign: Path
) -> None:
    with pytest.raises(HandshakeError, match=r"TLS handshake .* failed: certificate rejected"):
        await websocket_transport(tls(foreign, "guest")).connect(server.address, peer_id="host1")
    assert server.accepted == []


async def test_valid_certificate_claiming_another_party_is_refused(
    server: Server, federation: Path
) -> None:
    impostor = websocket_transport(tls(federation, "guest"))
    impostor.party_id = "host2"  # claims host2 with guest's certificate
    with pytest.raises(HandshakeError, match=r"HTTP 403.*for party 'guest' but .*'host2'"):
        await impostor.connect(server.address, peer_id="host1")
    assert "for party 'guest' but the client claims ['host2']" in server.reported()
    assert server.accepted == []


async def test_client_asking_for_another_party_is_refused_by_the_server(
    server: Server, federation: Path
) -> None:
    context = certs.client_context(tls(federation, "guest"))
    headers = {PARTY_HEADER: "guest", PEER_HEADER: "host2"}
    with pytest.raises(InvalidStatus) as caught:
        await ws_connect(server.address, ssl=context, additional_headers=headers, proxy=None)
    assert caught.value.response.status_code == 403
    assert "this is party 'host1'" in server.reported()


async def test_expired_certificate_is_refused(server: Server, expired: certs.TLSConfig) -> None:
    with pytest.raises(HandshakeError, match="refused the connection") as caught:
        await websocket_transport(expired).connect(server.address, peer_id="host1")
    assert caught.value.certificate_refused
    explained = translate_error(caught.value, tls=expired)
    assert isinstance(explained, exceptions.HandshakeError)
    assert "expired on" in str(explained)
    await server.settle()
    assert "certificate has expired" in server.reported()
    assert server.accepted == []


async def test_client_without_certificate_is_refused(server: Server, federation: Path) -> None:
    context = raw_client_context(federation / "ca" / "ca.pem")
    with pytest.raises((InvalidHandshake, OSError)):
        await ws_connect(server.address, ssl=context, proxy=None, open_timeout=5)
    await server.settle()
    assert "the client presented no certificate" in server.reported()
    assert server.accepted == []


async def test_certificate_without_party_id_is_refused(
    server: Server, nameless: ssl.SSLContext
) -> None:
    headers = {PARTY_HEADER: "guest", PEER_HEADER: "host1"}
    with pytest.raises(InvalidStatus) as caught:
        await ws_connect(server.address, ssl=nameless, additional_headers=headers, proxy=None)
    assert caught.value.response.status_code == 403
    assert "must name exactly one party" in server.reported()


async def test_plain_connection_is_refused(server: Server) -> None:
    plain = server.address.replace("wss://", "ws://")
    with pytest.raises((InvalidHandshake, OSError)):
        await ws_connect(plain, proxy=None, open_timeout=5)
    await server.settle()
    assert "did not speak TLS" in server.reported()


async def test_tls_below_1_3_is_refused(server: Server, federation: Path) -> None:
    guest = federation / "guest"
    context = raw_client_context(guest / "ca.pem", guest / "cert.pem", guest / "key.pem")
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((InvalidHandshake, OSError)):
        await ws_connect(server.address, ssl=context, proxy=None, open_timeout=5)
    await server.settle()
    assert "TLS version" in server.reported() or "older than 1.3" in server.reported()


async def test_connecting_to_a_plain_server_fails_clearly(federation: Path) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        writer.close()

    plain = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = plain.sockets[0].getsockname()[1]
    try:
        with pytest.raises(HandshakeError, match=r"TLS handshake .* failed"):
            await websocket_transport(tls(federation, "guest")).connect(
                f"wss://127.0.0.1:{port}", peer_id="host1"
            )
    finally:
        plain.close()
        await plain.wait_closed()


async def test_nobody_listening_is_a_transport_error_not_a_handshake_error(
    federation: Path,
) -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(TransportError, match="cannot connect") as caught:
        await websocket_transport(tls(federation, "guest")).connect(
            f"127.0.0.1:{port}", peer_id="host1"
        )
    assert not isinstance(caught.value, HandshakeError)


def test_transport_refuses_a_certificate_of_another_party(federation: Path) -> None:
    with pytest.raises(ConfigError, match="is for party 'guest', not 'host1'"):
        websocket_transport(tls(federation, "guest"), party_id="host1")


@pytest.mark.parametrize("address", ["http://127.0.0.1:1", "127.0.0.1", "wss://h:1/path"])
def test_bad_addresses_are_config_errors(federation: Path, address: str) -> None:
    transport = websocket_transport(tls(federation, "guest"))
    with pytest.raises(TransportConfigError, match="address"):
        asyncio.run(transport.connect(address, peer_id="host1"))


async def test_handler_failure_is_reported_and_the_link_closed(federation: Path) -> None:
    errors: list[Exception] = []

    async def broken(connection: Connection) -> None:
        raise RuntimeError("boom")

    listener = await websocket_transport(tls(federation, "host1"), on_error=errors.append).serve(
        "127.0.0.1:0", broken
    )
    try:
        client = await websocket_transport(tls(federation, "guest")).connect(
            listener.address, peer_id="host1"
        )
        with pytest.raises(TransportError, match="code 1011"):
            await client.receive()
        assert "RuntimeError('boom')" in str(errors[0])
    finally:
        await listener.close()


def test_reporting_hook_failure_does_not_break_the_server(
    federation: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def bad_hook(error: Exception) -> None:
        raise ValueError("hook bug")

    transport = websocket_transport(tls(federation, "host1"), on_error=bad_hook)
    report: Callable[[Exception], None] = transport._report
    report(HandshakeError("refused a client: test"))
    assert "refused a client: test" in caplog.text
    assert "the on_error hook failed" in caplog.text


def test_the_transport_requires_mutual_tls_contexts(federation: Path) -> None:
    config = tls(federation, "guest")
    lax = certs.client_context(config)
    lax.verify_mode = ssl.CERT_OPTIONAL
    with pytest.raises(TransportConfigError, match="client TLS context must require"):
        WebSocketTransport(
            "guest",
            server_ssl=certs.server_context(config),
            client_ssl=lax,
            peer_id_from_cert=peer_party_id,
        )
    with pytest.raises(TransportConfigError, match="invalid party id"):
        WebSocketTransport(
            "two words",
            server_ssl=certs.server_context(config),
            client_ssl=certs.client_context(config),
            peer_id_from_cert=peer_party_id,
        )


async def test_the_transport_takes_the_party_id_from_its_identity_function(
    federation: Path,
) -> None:
    """Only the given function reads certificates: the transport knows no certificate format."""
    seen: list[str] = []

    def by_common_name(peercert: object) -> str | None:
        assert isinstance(peercert, dict)
        for rdn in peercert["subject"]:
            for key, value in rdn:
                if key == "commonName":
                    return f"cn-{value}"
        return None

    def transport(party: str) -> WebSocketTransport:
        config = tls(federation, party)
        return WebSocketTransport(
            f"cn-{party}",
            server_ssl=certs.server_context(config),
            client_ssl=certs.client_context(config),
            peer_id_from_cert=by_common_name,
        )

    async def handler(connection: Connection) -> None:
        seen.append(connection.peer_id)
        await connection.send(b"hi")

    listener = await transport("host1").serve("127.0.0.1:0", handler)
    try:
        client = await transport("guest").connect(listener.address, peer_id="cn-host1")
        assert client.peer_id == "cn-host1"
        assert await client.receive() == b"hi"
        await client.close()
        with pytest.raises(HandshakeError, match="for party 'cn-host1', expected 'host1'"):
            await transport("guest").connect(listener.address, peer_id="host1")
    finally:
        await listener.close()
    assert seen == ["cn-guest"]
