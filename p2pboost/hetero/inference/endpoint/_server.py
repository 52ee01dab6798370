"""The endpoint's server side: accept, validate and score requests (see the package docs)."""

from __future__ import annotations

import asyncio
import contextlib
import http
import ipaddress
import itertools
import json
import logging
import ssl
from collections.abc import (
    Callable,
    Collection,
    Mapping,
)
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from p2pboost.certs import TLSConfig, party_id_from_peercert, server_context
from p2pboost.exceptions import (
    ConfigError,
    HandshakeError,
    InputError,
    P2PBoostError,
    TransportError,
)
from p2pboost.hetero.inference.predictor import GuestPredictor
from p2pboost.hetero.inference.session import MAX_ID_CHARS
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
_INT64_MAX = 2**63 - 1

RequestId: TypeAlias = int | str
Score: TypeAlias = float | npt.NDArray[np.float64]


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


# -- parsing requests ---------------------------------------------------------------------------


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _decode(message: str | bytes, max_items: int) -> tuple[list[Any], bool]:
    """A message's requests and whether it was a list (then the reply is a list too)."""
    if not isinstance(message, str):
        raise InputError("send requests as JSON text messages, not binary ones")
    try:
        obj = json.loads(message, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"invalid JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, list):
        return [obj], False
    if len(obj) > max_items:
        raise InputError(f"{len(obj)} requests in one message (at most {max_items})")
    return obj, True


def _request_id(request: Mapping[str, Any]) -> RequestId:
    if "id" not in request:
        raise InputError('a request needs an "id"')
    rid = request["id"]
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        raise InputError(f'"id" must be an integer or a string, not {type(rid).__name__}')
    if isinstance(rid, int) and not -_INT64_MAX - 1 <= rid <= _INT64_MAX:
        raise InputError('an integer "id" must fit in 64 bits')
    if isinstance(rid, str) and not 0 < len(rid) <= MAX_ID_CHARS:
        raise InputError(f'a string "id" must have 1 to {MAX_ID_CHARS} characters')
    return rid


def _features(value: object, n_features: int) -> npt.NDArray[np.float64]:
    """One row of guest features: numbers, ``null`` for missing, exactly ``n_features``."""
    if not isinstance(value, list):
        raise InputError(f'"features" must be a list of {n_features} numbers')
    if len(value) != n_features:
        raise InputError(f"expected {n_features} guest features, got {len(value)}")
    if not all(v is None or (type(v) is int or type(v) is float) for v in value):
        raise InputError('"features" must hold numbers or null (missing)')
    try:
        row = np.array([np.nan if v is None else v for v in value], dtype=np.float64)
    except OverflowError:
        raise InputError('a number in "features" is out of range') from None
    if np.isinf(row).any():  # json reads 1e999 as inf
        raise InputError('"features" must be finite numbers or null (missing)')
    return row


class _IdKind:
    """The one kind of id (int or str) this endpoint serves.

    Hosts keep ids of one kind, and a host's store refuses a query of the other kind, which
    ends that host's serving session: the query fails and the next batch pays for a new
    session. So that one client's wrong ids cannot make the others pay, the kind is fixed as
    soon as it is known (the guest's store, or the first request that got a score) and
    requests of the other kind are refused before they reach the predictor.
    """

    def __init__(self, predictor: GuestPredictor) -> None:
        self.kind: type | None = None
        store = predictor.guest_store
        if store is not None:
            with contextlib.suppress(P2PBoostError):
                ids = store.ids()
                self.kind = {"i": int, "U": str}.get(ids.dtype.kind) if ids.size else None

    def check(self, rid: RequestId) -> None:
        if self.kind is not None and not isinstance(rid, self.kind):
            kind = "integers" if self.kind is int else "strings"
            raise InputError(f"ids on this endpoint are {kind}")

    def learn(self, rid: RequestId) -> None:
        if self.kind is None:
            self.kind = type(rid)


@dataclass(slots=True)
class _Message:
    """One message's requests, replied to together (as a list when ``many``).

    ``ids`` holds each request's id (``None`` where it had none readable), ``errors`` the
    requests refused before the predictor, by position, and ``parts`` the groups handed to
    the predictor: their positions and the one future of each (``submit_many``).
    """

    ids: list[RequestId | None]
    many: bool
    received: float = 0.0
    errors: dict[int, BaseException] = field(default_factory=dict)
    parts: list[tuple[list[int], asyncio.Future[list[Any]]]] = field(default_factory=list)


_KEYS = frozenset(("id", "features"))
#: The JSON types a feature may have (``bool`` is refused: it is not a number here).
_NUMBER_TYPES = frozenset((int, float, type(None)))


def _check_request(request: object) -> tuple[RequestId, object]:
    """A request's id and its ``"features"`` value (unchecked); raises for the rest."""
    if not isinstance(request, dict):
        raise InputError('a request must be a JSON object {"id": ..., "features": [...]}')
    if len(request) > 2 or not request.keys() <= _KEYS:
        extra = set(request) - _KEYS
        raise InputError(f"unknown request key(s): {', '.join(sorted(map(str, extra)))}")
    return _request_id(request), request.get("features")


def _rows(
    rows: list[list[Any]], positions: list[int], n_features: int, errors: dict[int, BaseException]
) -> tuple[list[int], npt.NDArray[np.float64]]:
    """The feature rows of a message as one matrix, checked as :func:`_features` checks one:
    one conversion for the whole message, then per row only for messages with a bad value
    (those rows' errors go to ``errors``). The positions kept, and their rows."""
    matrix: npt.NDArray[np.float64] | None = None
    if set(map(type, itertools.chain.from_iterable(rows))) <= _NUMBER_TYPES:
        with contextlib.suppress(OverflowError):  # a huge integer: find it row by row
            matrix = np.array(rows, dtype=np.float64).reshape(len(rows), n_features)
    if matrix is None:
        kept, good = [], []
        for position, row in zip(positions, rows, strict=True):
            try:
                good.append(_features(row, n_features))
                kept.append(position)
            except InputError as exc:
                errors[position] = exc
        return kept, np.array(good, dtype=np.float64).reshape(len(kept), n_features)
    infinite = np.asarray(np.isinf(matrix).any(axis=1))  # json reads 1e999 as inf
    if not infinite.any():
        return positions, matrix
    for i in np.flatnonzero(infinite).tolist():
        errors[positions[i]] = InputError('"features" must be finite numbers or null (missing)')
    finite = ~infinite
    return [p for p, ok in zip(positions, finite.tolist(), strict=True) if ok], matrix[finite]


def _submit(
    requests: list[Any], many: bool, received: float, predictor: GuestPredictor, ids: _IdKind
) -> _Message:
    """Validate a message's requests and hand the valid ones to the micro-batcher as (at
    most) two groups, those with features and those to look up; never raises for bad input.
    """
    n_features = predictor.model.n_features
    message = _Message([None] * len(requests), many, received)
    errors = message.errors
    with_x: list[int] = []
    rows: list[list[Any]] = []
    lookup: list[int] = []
    for i, request in enumerate(requests):
        try:
            rid, features = _check_request(request)
            message.ids[i] = rid
            ids.check(rid)
            if features is None:
                lookup.append(i)
            elif type(features) is not list or len(features) != n_features:
                _features(features, n_features)  # raises, saying why
            else:
                with_x.append(i)
                rows.append(features)
        except P2PBoostError as exc:
            errors[i] = exc
    if rows:
        with_x, matrix = _rows(rows, with_x, n_features, errors)
        _hand_over(message, with_x, matrix, predictor)
    if lookup:
        _hand_over(message, lookup, None, predictor)
    return message


def _hand_over(
    message: _Message,
    positions: list[int],
    X: npt.NDArray[np.float64] | None,
    predictor: GuestPredictor,
) -> None:
    if not positions:
        return
    try:
        future = predictor.submit_many([message.ids[p] for p in positions], X)
    except P2PBoostError as exc:  # closed, not started: every request says so
        message.errors.update(dict.fromkeys(positions, exc))
        return
    message.parts.append((positions, future))


# -- replies ----------------------------------------------------------------------------------


def _error(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, P2PBoostError):
        return {"type": type(exc).__name__, "message": str(exc)}
    logger.error("unexpected error while scoring", exc_info=exc)
    return {"type": "InternalError", "message": "internal error (the server's log says more)"}


def _score_json(score: Score) -> float | list[float]:
    if np.ndim(score) == 0:
        return float(score)
    values: list[float] = np.ravel(np.asarray(score, dtype=np.float64)).tolist()
    return values


async def _replies(message: _Message, ids: _IdKind) -> list[dict[str, Any]]:
    """Every request's reply, in order: its score, or its error."""
    outcomes: list[Any] = [None] * len(message.ids)
    for position, exc in message.errors.items():
        outcomes[position] = exc
    for positions, future in message.parts:
        try:
            results = await future
        except Exception as exc:  # submit_many resolves to values; anything else is a bug
            results = [exc] * len(positions)
        for position, result in zip(positions, results, strict=True):
            outcomes[position] = result
    replies: list[dict[str, Any]] = []
    for rid, outcome in zip(message.ids, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            replies.append({"id": rid, "error": _error(outcome)})
        else:
            score = outcome if type(outcome) is float else _score_json(outcome)
            replies.append({"id": rid, "score": score})
            if ids.kind is None:
                assert rid is not None
                ids.learn(rid)
    return replies


def _discard(message: _Message) -> None:
    """Cancel what is still queued (the predictor skips it)."""
    for _, future in message.parts:
        if not future.done():
            future.cancel()


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


# -- one connection ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Connection:
    """A client connection: a reader that submits, a writer that replies in order."""

    ws: ServerConnection
    predictor: GuestPredictor
    ids: _IdKind
    limits: EndpointLimits
    metrics: Metrics

    async def run(self) -> None:
        queue: asyncio.Queue[_Message] = asyncio.Queue()
        credit = _Credit(self.limits.max_in_flight)
        reader = asyncio.create_task(self._read(queue, credit))
        writer = asyncio.create_task(self._write(queue, credit))
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer):
                task.cancel()
            results = await asyncio.gather(reader, writer, return_exceptions=True)
            while not queue.empty():
                _discard(queue.get_nowait())
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, ConnectionClosed):
                raise result

    async def _read(self, queue: asyncio.Queue[_Message], credit: _Credit) -> None:
        loop = asyncio.get_running_loop()
        async for message in self.ws:  # ends when the client closes
            received = loop.time()
            if isinstance(message, str):
                size = len(message) if message.isascii() else len(message.encode())
            else:
                size = len(message)
            try:
                requests, many = _decode(message, self.limits.max_in_flight)
            except InputError as exc:
                self.metrics.received(size, 1)
                await credit.take(1)
                queue.put_nowait(_Message([None], False, received, {0: exc}))
                continue
            self.metrics.received(size, len(requests))
            await credit.take(len(requests))  # before submitting: bounds what is queued
            queue.put_nowait(_submit(requests, many, received, self.predictor, self.ids))

    async def _write(self, queue: asyncio.Queue[_Message], credit: _Credit) -> None:
        loop = asyncio.get_running_loop()
        while True:
            message = await queue.get()
            try:
                replies = await _replies(message, self.ids)
            finally:
                _discard(message)
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
    ids = _IdKind(predictor)
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
