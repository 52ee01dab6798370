"""WebSockets over mutual TLS, with the peer's party id taken from its certificate.

The transport takes ready TLS contexts (the caller decides the CA, the certificate, TLS 1.3
only; p2pboost builds them with :mod:`p2pboost.certs` in :mod:`p2pboost.net.transport`) and a
function that reads a party id from a verified peer certificate. It imports nothing of
p2pboost. Security model, in the order the checks happen:

1. **Mutual TLS.** Both contexts must require the peer's certificate (``CERT_REQUIRED``): a
   client without a certificate, with one from an untrusted CA, with an expired one, or
   speaking plain TCP fails the TLS handshake.
2. **Party id instead of host name.** Parties reach each other by IP address, so host names are
   not checked; the party id that ``peer_id_from_cert`` reads from the certificate is.

   * Client side, right after the TLS handshake and *before* any HTTP byte is sent, the
     server's certificate must name the party the caller asked for (``connect(peer_id=...)``).
   * Server side, in the WebSocket opening handshake, the client's certificate must name the
     party it claims in the ``X-P2PBoost-Party`` header, that party must be in
     ``allowed_peers`` (when given), and the ``X-P2PBoost-Peer`` header (the party the client
     wants) must be this server's own id. A refusal is an HTTP 403 whose body says why.

3. **Limits.** ``max_message_bytes`` bounds every message both ways (``FrameTooLarge``);
   compression is off (compressing secrets next to data a peer influences leaks them through
   sizes, as in CRIME/BREACH, and ciphertexts do not compress anyway); the TLS and WebSocket
   opening handshakes must finish within ``open_timeout``.

Errors at the boundary: every library exception (``ssl.SSLError``, ``OSError``,
``websockets.exceptions.*``) is translated into :mod:`p2pboost.transports.errors`. A refused
connection gives a :class:`~p2pboost.transports.errors.HandshakeError` with a readable message
at the client, and at the server a :class:`~p2pboost.transports.errors.HandshakeError` passed to
the ``on_error`` hook and logged as a warning on the ``p2pboost.transport.websocket`` logger;
the server keeps serving. One blind spot: asyncio drops the TLS alert a refusing peer sends, so
a client refused during TLS sees only a hang-up (:meth:`WebSocketTransport.connect` then says
so, and marks the error ``certificate_refused`` so that a caller who knows our certificate can
check it for the usual causes), and a server whose certificate a client refused sees only the
client hanging up in the middle of the handshake. The server reports that hang-up too, as the
refusal it almost always is (two certificates from different CAs); the client's error says
exactly why. Every refusal in the TLS handshake names the client's address; the warning for
refusals from one address is repeated at most once a minute (the rest go to debug; ``on_error``
gets them all).

A server's handler runs once per accepted connection; the connection closes when it returns.

Performance: :meth:`WebSocketConnection.send` is one length check around ``ws.send`` (no copy);
back-pressure comes from websockets' own water marks (``write_limit`` for sending, ``max_queue``
for receiving), so a peer that does not read eventually makes ``send`` wait.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import http
import logging
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import HeadersLike
from websockets.exceptions import (
    ConcurrencyError,
    ConnectionClosed,
    InvalidHandshake,
    InvalidMessage,
    InvalidStatus,
    InvalidURI,
)
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.protocol import State

from .base import Connection, ConnectionHandler, Listener, Transport
from .errors import (
    FrameTooLarge,
    HandshakeError,
    TransportConfigError,
    TransportError,
    TransportUsageError,
)

__all__ = [
    "PARTY_HEADER",
    "PEER_HEADER",
    "PeerIdentity",
    "WebSocketConnection",
    "WebSocketListener",
    "WebSocketTransport",
    "describe_tls_error",
]

logger = logging.getLogger("p2pboost.transport.websocket")

#: Request header in which the client claims its own party id (checked against its cert).
PARTY_HEADER = "X-P2PBoost-Party"
#: Request header naming the party the client wants to reach (checked against the server's id).
PEER_HEADER = "X-P2PBoost-Peer"
#: Default largest message, in bytes.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

ErrorHook = Callable[[Exception], None]
#: Reads the party id from a *verified* peer certificate (the dict ``getpeercert()`` returns);
#: ``None`` when the certificate names no valid party (the connection is then refused).
PeerIdentity = Callable[[Mapping[str, Any]], str | None]

# OpenSSL reasons that deserve a plainer sentence than OpenSSL's own.
_TLS_REASONS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "the client presented no certificate",
    "HTTP_REQUEST": "the client did not speak TLS (a plain HTTP request)",
    "WRONG_VERSION_NUMBER": "the peer did not speak TLS 1.3 (plain connection or old TLS)",
    "UNSUPPORTED_PROTOCOL": "the peer offered only TLS versions older than 1.3",
    "TLSV1_ALERT_PROTOCOL_VERSION": "the peer refused the TLS version (1.3 only)",
    "TLSV1_ALERT_UNKNOWN_CA": "the peer does not trust our certificate's CA",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer refused our certificate as expired",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the peer requires a client certificate",
}


# X509 verification codes that mean "signed by a CA we do not trust" (OpenSSL's x509_vfy.h):
# unable to get issuer certificate, self-signed certificate in the chain, unable to get local
# issuer certificate, unable to verify the first certificate.
_UNKNOWN_ISSUER_CODES = frozenset({2, 19, 20, 21})

#: Seconds during which further TLS refusals of one client address are logged at debug level.
REFUSAL_LOG_INTERVAL = 60.0


def describe_tls_error(exc: BaseException) -> str:
    """A one-line explanation of an ``ssl`` error, for people."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in _UNKNOWN_ISSUER_CODES:
            return (
                f"certificate rejected: {exc.verify_message} (the certificate does not come"
                " from our CA)"
            )
        return f"certificate rejected: {exc.verify_message}"
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return "the peer closed the connection during the TLS handshake"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        return _TLS_REASONS.get(reason, f"TLS error {reason or exc}")
    return str(exc) or type(exc).__name__


def _handshake_protocol(frame: FrameType | None) -> asyncio.sslproto.SSLProtocol | None:
    """The asyncio ``SSLProtocol`` running the handshake that called us, if it can be found.

    ``SSLContext.sslobject_class`` is the only hook asyncio offers into a server's TLS
    handshake, and the ``SSLObject`` it creates knows neither the client's address nor when
    the client hangs up (asyncio then ends the handshake without calling the object again).
    Both are on the ``SSLProtocol`` that calls ``do_handshake``, two frames up at most. Found by
    type, so another event loop (or a future asyncio) gives ``None``: the refusals asyncio
    reports to the object are still logged, without the address.
    """
    for _ in range(3):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, asyncio.sslproto.SSLProtocol):
            return candidate
        frame = frame.f_back
    return None


def _reporting_sslobject(report: Callable[[str, str], None]) -> type[ssl.SSLObject]:
    """An ``SSLObject`` class that reports failed server-side TLS handshakes.

    asyncio fails such handshakes silently (before websockets ever sees the connection), so the
    server context uses this documented hook (``SSLContext.sslobject_class``) to tell the
    operator that, and why, a client was refused, and from which address. ``report`` gets the
    client's address and the reason.
    """

    class ReportingSSLObject(ssl.SSLObject):
        _client = "an unknown address"
        _calls = 0
        _reported = False

        def do_handshake(self) -> None:
            self._calls += 1
            if self._calls == 1:
                self._watch(_handshake_protocol(sys._getframe(1)))
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise
            except ssl.SSLError as exc:
                self._reported = True
                report(self._client, describe_tls_error(exc))
                raise

        def _watch(self, protocol: asyncio.sslproto.SSLProtocol | None) -> None:
            """Learn the client's address, and hear of the handshake's end from asyncio."""
            if protocol is None:
                return
            try:
                peer = protocol._get_extra_info("peername")
                waiter: asyncio.Future[None] | None = protocol._waiter
            except AttributeError:
                return
            if isinstance(peer, tuple) and len(peer) >= 2:
                host, port = peer[:2]
                self._client = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
            if waiter is not None:
                waiter.add_done_callback(self._ended)

        def _ended(self, waiter: asyncio.Future[None]) -> None:
            if self._reported or waiter.cancelled():
                return
            exc = waiter.exception()
            # The first call runs before any byte arrives: a client that hung up before a
            # second one never spoke TLS (a port probe), which is no refusal worth a warning.
            if exc is None or self._calls < 2:
                return
            if isinstance(exc, ConnectionAbortedError):
                report(self._client, "the client did not finish the TLS handshake in time")
            elif isinstance(exc, ConnectionError):
                report(
                    self._client,
                    "the client hung up in the middle of the handshake, which means it does not"
                    " trust our certificate (most often the two certificates come from"
                    " different CAs); the client's log says why",
                )

    return ReportingSSLObject


def _split_address(address: str) -> tuple[str, int]:
    """``"wss://host:port"`` or ``"host:port"`` -> ``(host, port)``."""
    parts = urlsplit(address if "://" in address else f"wss://{address}")
    if parts.scheme != "wss":
        raise TransportConfigError(f"unsupported address {address!r}: use wss://host:port")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None or parts.path not in ("", "/"):
        raise TransportConfigError(f"invalid address {address!r}: use wss://host:port")
    return parts.hostname or "", port


def _format_address(host: str, port: int) -> str:
    return f"wss://[{host}]:{port}" if ":" in host else f"wss://{host}:{port}"


def _peer_party(transport: asyncio.BaseTransport | None, identify: PeerIdentity) -> str:
    """The verified party id in the certificate of the peer on ``transport``."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    peercert = ssl_object.getpeercert() if ssl_object is not None else None
    if not peercert:
        raise HandshakeError("the peer presented no verified certificate")
    party = identify(peercert)
    if party is None:
        raise HandshakeError(
            "the peer's certificate names no valid party id (a certificate must name exactly"
            " one party)"
        )
    return party


def _client_connection_class(identify: PeerIdentity) -> type[ClientConnection]:
    """A ``ClientConnection`` that checks the server's party id after TLS and before the first
    HTTP byte is sent (one class per transport: websockets takes a class, not an instance)."""

    class _ClientConnection(ClientConnection):
        async def handshake(
            self,
            additional_headers: HeadersLike | None = None,
            user_agent_header: str | None = None,
        ) -> None:
            # connect() passes the party we want in the headers it sends.
            if not isinstance(additional_headers, dict) or PEER_HEADER not in additional_headers:
                raise TransportUsageError(f"the {PEER_HEADER} header is required")
            expected = additional_headers[PEER_HEADER]
            actual = _peer_party(self.transport, identify)
            if actual != expected:
                raise HandshakeError(
                    f"the server's certificate is for party {actual!r}, expected {expected!r}"
                )
            try:
                await super().handshake(additional_headers, user_agent_header)
            except InvalidHandshake:
                # In TLS 1.3 the server checks our certificate after our side of the handshake
                # is done, so its refusal (an alert) can only arrive while we wait for the HTTP
                # response. asyncio usually drops that alert (then connect() explains the bare
                # hang-up instead), but when it does get through, it says exactly why.
                lost = self.connection_exc
                if isinstance(lost, ssl.SSLError):
                    raise HandshakeError(
                        f"the server refused the TLS handshake: {describe_tls_error(lost)}"
                    ) from None
                raise

    return _ClientConnection


class _ServerConnection(ServerConnection):
    #: The client's party id, set by the identity check before the handler runs.
    party_id: str = ""


class WebSocketConnection(Connection):
    """One authenticated WebSocket link to ``peer_id``."""

    __slots__ = ("_max", "_ws", "peer_id")

    def __init__(
        self, ws: ClientConnection | ServerConnection, peer_id: str, max_message_bytes: int
    ) -> None:
        self._ws = ws
        self._max = max_message_bytes
        self.peer_id = peer_id

    def __repr__(self) -> str:
        return f"<WebSocketConnection to {self.peer_id!r} at {self._ws.remote_address}>"

    @property
    def closed(self) -> bool:
        return self._ws.state is State.CLOSING or self._ws.state is State.CLOSED

    async def send(self, message: bytes) -> None:
        if len(message) > self._max:
            raise FrameTooLarge(
                f"message of {len(message)} bytes exceeds the limit of {self._max} bytes"
            )
        try:
            await self._ws.send(message)
        except ConnectionClosed as exc:
            raise self._closed_error(exc) from None

    async def receive(self) -> bytes:
        try:
            message = await self._ws.recv()
        except ConnectionClosed as exc:
            raise self._closed_error(exc) from None
        except ConcurrencyError:
            raise TransportUsageError("receive() called while another receive() waits") from None
        if isinstance(message, str):
            await self._ws.close(CloseCode.UNSUPPORTED_DATA, "binary messages only")
            raise TransportError(f"peer {self.peer_id!r} sent a text message; link closed")
        return message

    async def close(self) -> None:
        await self._ws.close()

    def _closed_error(self, exc: ConnectionClosed) -> TransportError:
        if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
            return FrameTooLarge(
                f"peer {self.peer_id!r} sent a message over the limit of {self._max} bytes; "
                "link closed"
            )
        if exc.rcvd is not None and exc.rcvd.code == CloseCode.MESSAGE_TOO_BIG:
            return FrameTooLarge(f"peer {self.peer_id!r} refused a message over its size limit")
        if exc.sent is not None and exc.rcvd_then_sent is False:
            return TransportError(f"connection to {self.peer_id!r} closed locally")
        if exc.rcvd is not None:
            reason = f" ({exc.rcvd.reason})" if exc.rcvd.reason else ""
            return TransportError(
                f"peer {self.peer_id!r} closed the connection, code {exc.rcvd.code}{reason}"
            )
        if exc.sent is not None:
            return TransportError(f"connection to {self.peer_id!r} closed locally")
        return TransportError(f"connection to {self.peer_id!r} lost")


class WebSocketListener(Listener):
    """A running WebSocket server."""

    def __init__(self, server: Server) -> None:
        self._server = server
        host, port = server.sockets[0].getsockname()[:2]
        self.address = _format_address(host, port)

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()


class WebSocketTransport(Transport):
    """WebSocket + mutual TLS transport for party ``party_id``.

    ``server_ssl`` / ``client_ssl``: the TLS contexts of our servers and of our connections,
    both requiring the peer's certificate (p2pboost builds them with
    :func:`p2pboost.certs.server_context` and :func:`~p2pboost.certs.client_context`; the client
    context must not check host names, since the party id replaces that check). The transport
    installs its reporting ``SSLObject`` class on ``server_ssl`` (the documented
    ``SSLContext.sslobject_class`` hook), so give each transport a context of its own.
    ``peer_id_from_cert``: reads the party id from a verified peer certificate (``None``: the
    certificate names none, and the connection is refused). ``allowed_peers``: parties allowed
    to connect to our servers (``None``: any party the contexts trust). ``ping_interval`` /
    ``ping_timeout``: WebSocket keep-alive, in seconds (``None`` disables; the node may run its
    own heart-beat instead). ``max_queue`` (incoming messages buffered) and ``write_limit``
    (outgoing bytes buffered) are the back-pressure water marks. ``on_error`` receives every
    error a server reports (refused clients, failing handlers), in addition to a warning on
    ``logger``. A malformed setting raises
    :class:`~p2pboost.transports.errors.TransportConfigError`.
    """

    def __init__(
        self,
        party_id: str,
        *,
        server_ssl: ssl.SSLContext,
        client_ssl: ssl.SSLContext,
        peer_id_from_cert: PeerIdentity,
        allowed_peers: Iterable[str] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        open_timeout: float = 10.0,
        close_timeout: float = 10.0,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        max_queue: int = 16,
        write_limit: int = 1 << 20,
        on_error: ErrorHook | None = None,
    ) -> None:
        # The id travels in an HTTP header: keep it to visible ASCII.
        if not (party_id and party_id.isascii() and party_id.isprintable()) or " " in party_id:
            raise TransportConfigError(f"invalid party id {party_id!r}")
        for role, context in (("server", server_ssl), ("client", client_ssl)):
            if context.verify_mode != ssl.CERT_REQUIRED:
                raise TransportConfigError(
                    f"the {role} TLS context must require the peer's certificate"
                    " (verify_mode CERT_REQUIRED): the party id is read from it"
                )
        if max_message_bytes < 1 or max_queue < 1 or write_limit < 1:
            raise TransportConfigError("max_message_bytes, max_queue and write_limit must be >= 1")
        self.party_id = party_id
        self.allowed_peers = None if allowed_peers is None else frozenset(allowed_peers)
        self.max_message_bytes = max_message_bytes
        self._on_error = on_error
        self._identify = peer_id_from_cert
        self._client_ssl = client_ssl
        self._server_ssl = server_ssl
        self._server_ssl.sslobject_class = _reporting_sslobject(self._report_tls_refusal)
        # Client address -> (when its refusal was last logged as a warning, refusals since).
        self._refusals_logged: dict[str, tuple[float, int]] = {}
        self._client_connection = _client_connection_class(peer_id_from_cert)
        self._open_timeout = open_timeout
        self._common: dict[str, Any] = {
            "compression": None,
            "max_size": max_message_bytes,
            "max_queue": max_queue,
            "write_limit": write_limit,
            "open_timeout": open_timeout,
            "close_timeout": close_timeout,
            "ping_interval": ping_interval,
            "ping_timeout": ping_timeout,
        }

    def _report(self, error: Exception) -> None:
        logger.warning("%s: %s", self.party_id, error)
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                logger.exception("the on_error hook failed")

    def _report_tls_refusal(self, client: str, reason: str) -> None:
        """Report a client refused in the TLS handshake: one warning a minute per address.

        A refused client usually retries (a party dials again until its reconnect timeout),
        and one warning with the cause is what the operator needs; the repeats go to debug
        and are counted in the next warning. ``on_error`` still receives every refusal.
        """
        error = HandshakeError(f"refused a TLS handshake from {client}: {reason}")
        host = client.rsplit(":", 1)[0]
        now = time.monotonic()
        if len(self._refusals_logged) > 1024:  # a scan from many addresses: forget the old
            self._refusals_logged = {
                h: seen
                for h, seen in self._refusals_logged.items()
                if now - seen[0] < REFUSAL_LOG_INTERVAL
            }
        last, quiet = self._refusals_logged.get(host, (float("-inf"), 0))
        if now - last < REFUSAL_LOG_INTERVAL:
            self._refusals_logged[host] = (last, quiet + 1)
            logger.debug("%s: %s", self.party_id, error)
        else:
            self._refusals_logged[host] = (now, 0)
            since = f" ({quiet} more refusals from {host} since the last warning)" if quiet else ""
            logger.warning("%s: %s%s", self.party_id, error, since)
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                logger.exception("the on_error hook failed")

    # -- client -------------------------------------------------------------------------------

    async def connect(self, address: str, *, peer_id: str) -> WebSocketConnection:
        host, port = _split_address(address)
        where = f"party {peer_id!r} at {_format_address(host, port)}"
        try:
            ws = await ws_connect(
                f"{_format_address(host, port)}/",
                ssl=self._client_ssl,
                additional_headers={PARTY_HEADER: self.party_id, PEER_HEADER: peer_id},
                user_agent_header=None,
                proxy=None,
                create_connection=self._client_connection,
                ssl_handshake_timeout=self._open_timeout,
                **self._common,
            )
        except HandshakeError as exc:
            raise HandshakeError(f"{where}: {exc}") from None
        except InvalidStatus as exc:
            body = exc.response.body.decode("utf-8", "replace").strip()
            raise HandshakeError(
                f"{where} refused the connection (HTTP {exc.response.status_code}): {body}"
            ) from None
        except ssl.SSLError as exc:
            raise HandshakeError(
                f"TLS handshake with {where} failed: {describe_tls_error(exc)}"
            ) from None
        except InvalidHandshake as exc:
            raise _refused(where, exc) from None
        except InvalidURI as exc:
            raise TransportConfigError(f"invalid address {address!r}: {exc}") from None
        except TimeoutError:
            raise TransportError(f"timed out connecting to {where}") from None
        except OSError as exc:
            raise TransportError(f"cannot connect to {where}: {exc.strerror or exc}") from None
        return WebSocketConnection(ws, peer_id, self.max_message_bytes)

    # -- server -------------------------------------------------------------------------------

    async def serve(self, address: str, handler: ConnectionHandler) -> WebSocketListener:
        host, port = _split_address(address)

        async def run(ws: ServerConnection) -> None:
            assert isinstance(ws, _ServerConnection)
            connection = WebSocketConnection(ws, ws.party_id, self.max_message_bytes)
            try:
                await handler(connection)
            except Exception as exc:
                self._report(TransportError(f"handler for party {ws.party_id!r} failed: {exc!r}"))
                await ws.close(CloseCode.INTERNAL_ERROR, "handler failed")

        try:
            server = await ws_serve(
                run,
                host or None,
                port,
                ssl=self._server_ssl,
                process_request=self._check_client,
                server_header=None,
                create_connection=_ServerConnection,
                ssl_handshake_timeout=self._open_timeout,
                **self._common,
            )
        except OSError as exc:
            raise TransportError(f"cannot listen on {address}: {exc.strerror or exc}") from None
        return WebSocketListener(server)

    def _check_client(self, ws: ServerConnection, request: Request) -> Response | None:
        """The server's identity check; a refusal is reported and answered with HTTP 403."""
        try:
            actual = _peer_party(ws.transport, self._identify)
        except HandshakeError as exc:
            return self._refuse(ws, str(exc))
        claimed = request.headers.get_all(PARTY_HEADER)
        if claimed != [actual]:
            return self._refuse(
                ws, f"the certificate is for party {actual!r} but the client claims {claimed}"
            )
        if self.allowed_peers is not None and actual not in self.allowed_peers:
            return self._refuse(ws, f"party {actual!r} is not an allowed peer")
        wanted = request.headers.get_all(PEER_HEADER)
        if wanted != [self.party_id]:
            return self._refuse(
                ws, f"party {actual!r} wants {wanted}, but this is party {self.party_id!r}"
            )
        assert isinstance(ws, _ServerConnection)
        ws.party_id = actual
        return None

    def _refuse(self, ws: ServerConnection, reason: str) -> Response:
        host, port = ws.remote_address[:2]
        self._report(HandshakeError(f"refused a client from {host}:{port}: {reason}"))
        return ws.respond(http.HTTPStatus.FORBIDDEN, reason + "\n")


def _refused(where: str, exc: InvalidHandshake) -> HandshakeError:
    """The error for a server that refused our opening handshake, explained as far as we can."""
    cause = _tls_cause(exc)
    if cause is not None:
        return HandshakeError(f"{where} refused the connection: {describe_tls_error(cause)}")
    if isinstance(exc, InvalidMessage):
        # asyncio drops the TLS alert a server sends when it refuses a client certificate, so
        # all we see is the connection closing: say what that means. The caller knows our
        # certificate and may check it for the usual causes (certificate_refused).
        return HandshakeError(
            f"{where} refused the connection: it closed the connection without answering,"
            " which means it refused our certificate (expired, unknown CA or missing); its log"
            " says why",
            certificate_refused=True,
        )
    return HandshakeError(f"{where} refused the connection: {exc}")


def _tls_cause(exc: BaseException) -> ssl.SSLError | None:
    """The ``ssl`` error that caused ``exc``, if any (a TLS alert read after the handshake)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
