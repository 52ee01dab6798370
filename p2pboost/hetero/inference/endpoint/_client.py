"""A Python client of the endpoint: pipelined requests, replies in order (see the package docs)."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Iterable,
    Mapping,
)
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from p2pboost.certs import TLSConfig, client_context, party_id_from_peercert
from p2pboost.exceptions import (
    ConfigError,
    HandshakeError,
    InputError,
    TransportError,
)
from p2pboost.transports.websocket import describe_tls_error

__all__ = ["stream_scores"]

#: Largest reply message ``stream_scores`` accepts (a list reply to ``max_in_flight`` requests).
_MAX_REPLY_BYTES = 64 << 20


def _client_ssl(url: str, tls: TLSConfig | None) -> ssl.SSLContext | None:
    scheme = urlsplit(url).scheme
    if scheme == "wss":
        if tls is None:
            raise ConfigError("a wss:// endpoint needs tls: a certificate from the federation CA")
        return client_context(tls)
    if scheme == "ws":
        if tls is not None:
            raise ConfigError("tls was given but the URL is ws:// (plaintext)")
        return None
    raise ConfigError(f"invalid endpoint URL {url!r}: use wss://host:port")


def _check_server(ws: ClientConnection, server_party: str | None) -> None:
    if server_party is None:
        return
    ssl_object = ws.transport.get_extra_info("ssl_object")
    peercert = ssl_object.getpeercert() if ssl_object is not None else None
    actual = party_id_from_peercert(peercert) if peercert else None
    if actual != server_party:
        raise HandshakeError(f"the endpoint is party {actual!r}, expected {server_party!r}")


class _Sent:
    """Marks, in the reply queue, that every request has been sent (``count`` of them)."""

    def __init__(self, count: int) -> None:
        self.count = count


async def _iterate(requests: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Any]:
    if isinstance(requests, AsyncIterable):
        async for request in requests:
            yield request
    else:
        for request in requests:
            yield request


async def stream_scores(
    url: str,
    requests: AsyncIterable[Mapping[str, Any]] | Iterable[Mapping[str, Any]],
    *,
    tls: TLSConfig | None = None,
    server_party: str | None = None,
    max_in_flight: int = 1024,
    group: int = 1,
    open_timeout: float = 10.0,
) -> AsyncIterator[dict[str, Any]]:
    """Send ``requests`` (``{"id": ..., "features": [...]}``) to a ``serve_endpoint`` and
    yield its replies in order, pipelined (up to ``max_in_flight`` awaiting their reply).

    ``tls``: this client's certificate from the federation CA (``wss://``). ``server_party``:
    refuse an endpoint whose certificate names another party. ``group``: requests per message
    (a list); more throughput for batch jobs, as the per-message cost is shared, but a partial
    group waits for the next requests, so keep 1 for requests that trickle in. Replies are
    dicts with ``"score"`` or ``"error"``; a failed request does not end the stream.
    """
    if not 1 <= group <= max_in_flight:
        raise InputError(f"group must be between 1 and max_in_flight ({max_in_flight})")
    context = _client_ssl(url, tls)
    window = _Window(max_in_flight)
    out: asyncio.Queue[list[Any] | _Sent | BaseException] = asyncio.Queue()
    try:
        ws = await ws_connect(
            url,
            ssl=context,
            compression=None,
            open_timeout=open_timeout,
            max_size=_MAX_REPLY_BYTES,
            user_agent_header=None,
            proxy=None,
        )
    except InvalidStatus as exc:
        body = exc.response.body.decode("utf-8", "replace").strip()
        raise HandshakeError(f"{url} refused the connection: {body}") from None
    except (InvalidHandshake, ssl.SSLError) as exc:
        raise HandshakeError(f"{url} refused the connection: {describe_tls_error(exc)}") from None
    except OSError as exc:
        raise TransportError(f"cannot connect to {url}: {exc.strerror or exc}") from None

    async def send() -> None:
        sent = 0
        async for chunk in _chunks(_iterate(requests), group):
            await window.take(len(chunk))
            await ws.send(json.dumps(chunk if group > 1 else chunk[0]))
            sent += len(chunk)
        out.put_nowait(_Sent(sent))

    async def receive() -> None:
        async for message in ws:
            reply = json.loads(message)
            out.put_nowait(reply if isinstance(reply, list) else [reply])  # a message at once
        raise TransportError("the endpoint closed the connection before every reply came")

    async with ws:
        _check_server(ws, server_party)
        tasks = [asyncio.create_task(_reporting(work(), out)) for work in (send, receive)]
        try:
            async for reply in _replies(out):
                window.give(1)
                yield reply
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


class _Window:
    """Requests that may still be sent before their replies are taken (``max_in_flight``):
    a counter, so that a message of ``group`` requests waits once, not once per request."""

    def __init__(self, total: int) -> None:
        self._free = total
        self._given = asyncio.Event()

    async def take(self, n: int) -> None:
        while self._free < n:
            self._given.clear()
            await self._given.wait()
        self._free -= n

    def give(self, n: int) -> None:
        self._free += n
        self._given.set()


async def _chunks(items: AsyncIterator[Any], size: int) -> AsyncIterator[list[Any]]:
    chunk: list[Any] = []
    async for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def _reporting(
    work: Awaitable[None], out: asyncio.Queue[list[Any] | _Sent | BaseException]
) -> None:
    """Run ``work``; whatever it raises goes to the consumer of ``out`` (it would hang else)."""
    try:
        await work
    except ConnectionClosed as exc:
        out.put_nowait(TransportError(f"the endpoint closed the connection: {exc}"))
    except Exception as exc:
        out.put_nowait(exc)


async def _replies(
    out: asyncio.Queue[list[Any] | _Sent | BaseException],
) -> AsyncIterator[dict[str, Any]]:
    """Replies until as many as were sent have come (the sender's count arrives in between);
    ``out`` holds each reply message's replies as a list."""
    received, total = 0, None
    while total is None or received < total:
        item = await out.get()
        if isinstance(item, _Sent):
            total = item.count
        elif isinstance(item, BaseException):
            raise item
        else:
            for reply in item:
                received += 1
                yield reply
