"""A listening party says, on its own side, whom it refused in the TLS handshake and why.

Over real TLS on loopback. The case that used to be silent: a client from another federation
(another CA) refuses our certificate and hangs up, so the server never gets a TLS error of its
own; the operator of the listening party saw nothing while it waited for a peer that would
never arrive. Each refused connection gives one warning naming the client's address and the
likely cause; repeats from the same address are kept to one warning a minute, and a bare TCP
probe (no TLS spoken) is not a refusal worth a warning.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from p2pboost import certs
from p2pboost.net.transport import websocket_transport
from p2pboost.testing import wait_until
from p2pboost.transports.base import Connection, Listener
from p2pboost.transports.errors import HandshakeError
from p2pboost.transports.websocket import WebSocketTransport, describe_tls_error

LOGGER = "p2pboost.transport.websocket"


@pytest.fixture(scope="module")
def intruders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second federation, with a CA of its own, whose party is also called ``guest``."""
    out = tmp_path_factory.mktemp("intruders")
    certs.init(out, ["guest"])
    return out


@pytest.fixture
async def listening(federation: Path) -> AsyncIterator[tuple[Listener, list[Exception]]]:
    errors: list[Exception] = []

    async def handler(connection: Connection) -> None:
        await connection.close()

    transport = websocket_transport(
        certs.TLSConfig.from_dir(federation / "host1"), on_error=errors.append
    )
    assert isinstance(transport, WebSocketTransport)
    listener = await transport.serve("127.0.0.1:0", handler)
    try:
        yield listener, errors
    finally:
        await listener.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


async def test_a_client_from_another_federation_is_logged_with_its_address(
    listening: tuple[Listener, list[Exception]],
    intruders: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    listener, errors = listening
    intruder = websocket_transport(certs.TLSConfig.from_dir(intruders / "guest"))
    with pytest.raises(HandshakeError, match="certificate rejected"):
        await intruder.connect(listener.address, peer_id="host1")
    await wait_until(lambda: bool(errors))
    (line,) = _warnings(caplog)
    assert line.startswith("host1: ")
    assert "refused a TLS handshake from 127.0.0.1:" in line
    assert "the client hung up" in line
    assert "does not trust our certificate" in line
    assert "come from different CAs" in line
    assert len(errors) == 1
    assert isinstance(errors[0], HandshakeError)


async def test_a_certificate_from_another_ca_is_logged_with_address_and_reason(
    listening: tuple[Listener, list[Exception]],
    federation: Path,
    intruders: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    listener, errors = listening
    # Trusts our CA (so only the server can refuse), but is certified by another.
    config = certs.TLSConfig(
        federation / "ca" / "ca.pem",
        intruders / "guest" / "cert.pem",
        intruders / "guest" / "key.pem",
    )
    with pytest.raises(HandshakeError, match="refused the connection"):
        await websocket_transport(config).connect(listener.address, peer_id="host1")
    await wait_until(lambda: bool(errors))
    (line,) = _warnings(caplog)
    assert "refused a TLS handshake from 127.0.0.1:" in line
    assert "unable to get local issuer certificate" in line
    assert "does not come from our CA" in line


async def test_repeated_refusals_from_one_address_are_one_warning_a_minute(
    listening: tuple[Listener, list[Exception]],
    intruders: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    listener, errors = listening
    intruder = websocket_transport(certs.TLSConfig.from_dir(intruders / "guest"))
    for _ in range(3):
        with pytest.raises(HandshakeError):
            await intruder.connect(listener.address, peer_id="host1")
    await wait_until(lambda: len(errors) == 3)
    assert len(_warnings(caplog)) == 1
    repeats = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert sum("refused a TLS handshake from 127.0.0.1:" in m for m in repeats) == 2


async def test_a_bare_tcp_probe_is_not_a_warning(
    listening: tuple[Listener, list[Exception]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    listener, errors = listening
    port = int(listener.address.rsplit(":", 1)[1])
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.2)
    assert _warnings(caplog) == []
    assert errors == []


def test_describe_tls_error_explains_an_unknown_issuer() -> None:
    exc = ssl.SSLCertVerificationError()
    exc.verify_code = 20
    exc.verify_message = "unable to get local issuer certificate"
    assert "does not come from our CA" in describe_tls_error(exc)
