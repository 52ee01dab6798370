"""The endpoint's server side: accept, validate and score requests (see the package docs)."""

from __future__ import annotations

import asyncio
import collections
import http
import ipaddress
import json
import logging
import ssl
from collections.abc import (
    Callable,
    Collection,
)
from dataclasses import dataclass
from typing import TypeAlias
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from p2pboost.certs import TLSConfig, party_id_from_peercert, server_context
from p2pboost.exceptions import (
    ConfigError,
    HandshakeError,
    InputError,
    TransportError,
)
from p2pboost.hetero.inference.endpoint._requests import (
    IdKind,
    Message,
    decode,
    discard,
    reply_to,
    submit,
)
from p2pboost.hetero.inference.predictor import GuestPredictor
from p2pboost.metrics import CONTENT_TYPE, MISSING, Metrics, endpoint_metrics
from p2pboost.transports.websocket import describe_tls_error

__all__ = [
    "DEFAULT_LISTEN",
    "HEALTH_PATH",
    "METRICS_PATH",
    "READY_PATH",
    "EndpointLimits",
    "probe_routes",
    "serve_endpoint",
]

logger = logging.getLogger("p2pboost.hetero.endpoint")

#: Where ``p2pboost serve`` listens unless the config says otherwise.
DEFAULT_LISTEN = "127.0.0.1:8765"
#: The plain-HTTP health check.
HEALTH_PATH = "/healthz"
#: Ready to score: the predictor started and every host's link is up (else 503).
READY_PATH = "/readyz"
#: Prometheus text (p2pboost.metrics); 501 without the ``metrics`` extra.
METRICS_PATH = "/metrics"
_WS_PATH = "/"


@dataclass(frozen=True, slots=True)
class EndpointLimits:
    """What one connection may cost the endpoint.

    ``max_message_bytes`` bounds a message (larger ones close the connection with 1009, as
    websockets must not buffer them to answer). ``max_in_flight`` bounds requests awaiting
    their reply per connection, and so also the length of a list message.
    """

    max_message_bytes: int = 1 << 20
    max_in_flight: int = 1024
    open_timeout: float = 10.0
    ping_interval: float | None = 20.0

    def __post_init__(self) -> None:
        if self.max_message_bytes < 64 or self.max_in_flight < 1 or not self.open_timeout > 0:
            raise ConfigError(
                "max_message_bytes must be >= 64, max_in_flight >= 1 and open_timeout > 0"
            )


# -- addresses and TLS ------------------------------------------------------------------------


def _split_listen(listen: str) -> tuple[str, str, int]:
    """``"host:port"`` or ``"ws(s)://host:port"`` -> ``(scheme or "", host, port)``."""
    parts = urlsplit(listen if "://" in listen else f"//{listen}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("", "ws", "wss") or port is None or parts.path not in ("", "/"):
        raise ConfigError(f"invalid listen address {listen!r}: use host:port")
    if not parts.hostname:
        raise ConfigError(f"invalid listen address {listen!r}: give the interface, e.g. 0.0.0.0")
    return parts.scheme, parts.hostname, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _server_ssl(
    listen: str, tls: TLSConfig | None, allow_plaintext: bool
) -> tuple[ssl.SSLContext | None, str, int]:
    """The TLS context to serve with (``None``: the opted-in plaintext on loopback), the
    interface and the port."""
    scheme, host, port = _split_listen(listen)
    if tls is not None:
        if scheme == "ws":
            raise ConfigError(f"{listen!r} says ws:// but a TLS configuration was given")
        context = server_context(tls)
        context.sslobject_class = _LoggingSSLObject
        return context, host, port
    if not allow_plaintext:
        raise ConfigError(
            "the endpoint needs TLS (the party's certificates); plaintext ws:// only with "
            "allow_plaintext=True, on a loopback address"
        )
    if scheme == "wss":
        raise ConfigError(f"{listen!r} says wss:// but no TLS configuration was given")
    if not _is_loopback(host):
        raise ConfigError(
            f"refusing plaintext on {host!r}: scores and features would cross the network "
            "unencrypted; use a loopback address (127.0.0.1) or give TLS"
        )
    return None, host, port


class _LoggingSSLObject(ssl.SSLObject):
    """Says in the log why a client was refused during TLS (asyncio drops it silently)."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            logger.warning("refused a client in the TLS handshake: %s", describe_tls_error(exc))
            raise


def _url(scheme: str, server: Server) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class _Credit:
    """Requests a connection may still have in flight; the reader waits when none is left."""

    def __init__(self, total: int) -> None:
        self._free = total
        self._given = asyncio.Event()

    async def take(self, n: int) -> None:
        while self._free < n:  # rare: the client pipelines more than max_in_flight
            self._given.clear()
            await self._given.wait()
        self._free -= n

    def give(self, n: int) -> None:
        self._free += n
        self._given.set()


class _Outbox:
    """A connection's messages awaiting their reply, in arrival order.

    The writer sleeps until the first of them is answered: the message's futures wake it
    once they are all done, and its arrival does not (a queue would wake the writer on the
    arrival only for it to wait on the futures again: two wake-ups per message, where one
    request per message is the common case).
    """

    def __init__(self) -> None:
        self._messages: collections.deque[Message] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._armed: Message | None = None

    def put(self, message: Message) -> None:
        self._messages.append(message)
        if self._waiter is not None and len(self._messages) == 1:
            self._arm(message)

    async def get(self) -> Message:
        """The first message, once every request of it is answered."""
        loop = asyncio.get_running_loop()
        while not (self._messages and _answered(self._messages[0])):
            self._waiter = loop.create_future()
            try:
                if self._messages:
                    self._arm(self._messages[0])
                await self._waiter
            finally:
                self._waiter = None
        return self._messages.popleft()

    def drain(self) -> list[Message]:
        """Every message left (the connection ends)."""
        messages = list(self._messages)
        self._messages.clear()
        return messages

    def _arm(self, message: Message) -> None:
        if self._armed is message:
            return
        self._armed = message
        pending = [future for _, future in message.parts if not future.done()]
        if not pending:
            self._wake()
        for future in pending:
            future.add_done_callback(self._on_done)

    def _on_done(self, _: object) -> None:
        if self._messages and _answered(self._messages[0]):
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def _answered(message: Message) -> bool:
    return all(future.done() for _, future in message.parts)


# -- one connection ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Connection:
    """A client connection: a reader that submits, a writer that replies in order."""

    ws: ServerConnection
    predictor: GuestPredictor
    ids: IdKind
    limits: EndpointLimits
    metrics: Metrics

    async def run(self) -> None:
        queue = _Outbox()
        credit = _Credit(self.limits.max_in_flight)
        reader = asyncio.create_task(self._read(queue, credit))
        writer = asyncio.create_task(self._write(queue, credit))
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer):
                task.cancel()
            results = await asyncio.gather(reader, writer, return_exceptions=True)
            for message in queue.drain():
                discard(message)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, ConnectionClosed):
                raise result

    async def _read(self, queue: _Outbox, credit: _Credit) -> None:
        loop = asyncio.get_running_loop()
        async for message in self.ws:  # ends when the client closes
            received = loop.time()
            if isinstance(message, str):
                size = len(message) if message.isascii() else len(message.encode())
            else:
                size = len(message)
            try:
                requests, many = decode(message, self.limits.max_in_flight)
            except InputError as exc:
                self.metrics.received(size, 1)
                await credit.take(1)
                queue.put(Message([None], False, received, {0: exc}))
                continue
            self.metrics.received(size, len(requests))
            await credit.take(len(requests))  # before submitting: bounds what is queued
            queue.put(submit(requests, many, received, self.predictor, self.ids))

    async def _write(self, queue: _Outbox, credit: _Credit) -> None:
        loop = asyncio.get_running_loop()
        while True:
            message = await queue.get()
            try:
                replies = await reply_to(message, self.ids)
            finally:
                discard(message)
            text = json.dumps(replies if message.many else replies[0])
            await self.ws.send(text)
            errors = [r["error"]["type"] for r in replies if "error" in r]
            size = len(text) if text.isascii() else len(text.encode())
            self.metrics.replied(size, loop.time() - message.received, errors)
            credit.give(len(message.ids))


# -- the server -------------------------------------------------------------------------------


def _client_party(ws: ServerConnection) -> str:
    ssl_object = ws.transport.get_extra_info("ssl_object")
    peercert = ssl_object.getpeercert() if ssl_object is not None else None
    if not peercert:
        raise HandshakeError("no verified client certificate")
    try:
        return party_id_from_peercert(peercert)
    except InputError as exc:
        raise HandshakeError(f"client certificate: {exc}") from None


def _health(predictor: GuestPredictor) -> str:
    stats = predictor.stats()
    return json.dumps(
        {"status": "ok", "batches": stats.batches, "rows": stats.rows, "failed": stats.failed}
    )


def _ready(predictor: GuestPredictor) -> tuple[http.HTTPStatus, str]:
    """Ready to score: every host's link is up (a batch now would not wait for a re-dial).
    A predictor with a stability window adds its ``{"rows", "psi", "band"}``."""
    node = predictor.node
    away = [h for h in predictor.model.hosts if not node.is_connected(h)]
    extra = {} if (snap := predictor.stability()) is None else {"stability": snap}
    if away:
        return http.HTTPStatus.SERVICE_UNAVAILABLE, json.dumps(
            {"status": "waiting", "hosts_away": away, **extra}
        )
    return http.HTTPStatus.OK, json.dumps({"status": "ready", **extra})


#: A probe's answer: status, content type, body.
ProbeAnswer: TypeAlias = tuple[http.HTTPStatus, str, str]


def probe_routes(
    predictor: GuestPredictor, metrics: Metrics
) -> dict[str, Callable[[], ProbeAnswer]]:
    """``/healthz``, ``/readyz`` and ``/metrics``: answered here behind the client
    certificate, and by a party's plain-HTTP probe port on loopback (``[serve] probe``)."""
    json_type = "application/json"

    def health() -> ProbeAnswer:
        return http.HTTPStatus.OK, json_type, _health(predictor) + "\n"

    def ready() -> ProbeAnswer:
        status, body = _ready(predictor)
        return status, json_type, body + "\n"

    def scrape() -> ProbeAnswer:
        if (snap := predictor.stability()) is not None:
            metrics.stability(snap["rows"], snap["psi"])
        text = metrics.render()
        if text is None:
            return http.HTTPStatus.NOT_IMPLEMENTED, "text/plain; charset=utf-8", MISSING + "\n"
        return http.HTTPStatus.OK, CONTENT_TYPE, text.decode()

    return {HEALTH_PATH: health, READY_PATH: ready, METRICS_PATH: scrape}


def _gate(
    predictor: GuestPredictor, tls: bool, clients: Collection[str] | None, metrics: Metrics
) -> Callable[[ServerConnection, Request], Response | None]:
    """``process_request``: the probes, then who may open a WebSocket."""
    hosts = frozenset(predictor.model.hosts)
    routes = probe_routes(predictor, metrics)

    def refuse(ws: ServerConnection, status: http.HTTPStatus, reason: str, kind: str) -> Response:
        host, port = ws.remote_address[:2]
        logger.warning("refused a client from %s:%s: %s", host, port, reason)
        metrics.refused(kind)
        return ws.respond(status, reason + "\n")

    def gate(ws: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path in routes:
            status, content_type, body = routes[path]()
            response = ws.respond(status, body)
            response.headers["Content-Type"] = content_type
            return response
        if path != _WS_PATH:
            return refuse(ws, http.HTTPStatus.NOT_FOUND, f"no such path {path[:100]!r}", "path")
        if not tls:
            return None
        try:
            party = _client_party(ws)
        except HandshakeError as exc:
            return refuse(ws, http.HTTPStatus.FORBIDDEN, str(exc), "certificate")
        if party in hosts:
            reason = f"{party!r} is a host of this model"
            return refuse(ws, http.HTTPStatus.FORBIDDEN, reason, "host")
        if clients is not None and party not in clients:
            reason = f"{party!r} is not an allowed client"
            return refuse(ws, http.HTTPStatus.FORBIDDEN, reason, "not_allowed")
        logger.info("client %r connected from %s:%s", party, *ws.remote_address[:2])
        return None

    return gate


async def serve_endpoint(
    predictor: GuestPredictor,
    listen: str = DEFAULT_LISTEN,
    *,
    tls: TLSConfig | None = None,
    allow_plaintext: bool = False,
    ready: Callable[[str], None] | None = None,
    clients: Collection[str] | None = None,
    limits: EndpointLimits | None = None,
    metrics: Metrics | None = None,
) -> None:
    """Serve scores from ``predictor`` (started) to external clients until cancelled.

    ``listen``: ``host:port`` (port 0 picks a free one). ``tls``: the guest's certificates;
    clients must present one from the same CA. ``allow_plaintext``: serve ``ws://`` without
    TLS, on a loopback address only. ``ready`` is called with the URL once listening (the
    port resolved). ``clients``: the party ids allowed to connect (``None``: any certificate
    from the CA except the model's hosts). ``metrics``: where the counters of ``/metrics``
    go (default: a fresh :func:`~p2pboost.metrics.endpoint_metrics`; the predictor's batches
    are counted there too). Cancelling closes every connection (code 1001).
    """
    context, host, port = _server_ssl(listen, tls, allow_plaintext)
    limits = limits or EndpointLimits()
    ids = IdKind(predictor)
    metrics = metrics if metrics is not None else endpoint_metrics()
    predictor.on_batch = metrics.batch

    async def handler(ws: ServerConnection) -> None:
        metrics.opened()
        try:
            await _Connection(ws, predictor, ids, limits, metrics).run()
        finally:
            metrics.closed()

    try:
        server = await ws_serve(
            handler,
            host,
            port,
            ssl=context,
            process_request=_gate(predictor, context is not None, clients, metrics),
            origins=[None],  # no browsers (see the module docstring)
            compression=None,
            server_header=None,
            max_size=limits.max_message_bytes,
            open_timeout=limits.open_timeout,
            ping_interval=limits.ping_interval,
        )
    except OSError as exc:
        raise TransportError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
    async with server:
        url = _url("ws" if context is None else "wss", server)
        logger.info("serving scores at %s", url)
        if ready is not None:
            ready(url)
        await asyncio.Event().wait()  # until cancelled; leaving closes the connections
