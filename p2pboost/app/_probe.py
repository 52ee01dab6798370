"""A party's probe port: ``/healthz``, ``/readyz`` and ``/metrics`` in plain HTTP on loopback.

The serving endpoint answers the same three paths, but behind mutual TLS: a probe must present
a certificate of the federation's CA, and since party certificates name the party by a URI
(no host name or IP address), ``curl --cacert`` cannot verify the endpoint's certificate
against ``127.0.0.1`` either. What an operator expects of a service is a port that a local
health check (Docker's ``HEALTHCHECK``, systemd, a node exporter's sidecar, a Prometheus on the
same machine) reads with ``curl http://127.0.0.1:PORT/healthz``. ``[serve] probe`` opens one:
off by default, and only on a loopback address (the config refuses others), so nothing beyond
the machine sees it; it answers GET on the three paths and nothing else, one request per
connection.

A guest's probe shows the endpoint's metrics (:mod:`p2pboost.metrics`) and its node's; a
host's (``serve`` or ``predict``) shows its node's: per peer, bytes and messages each way and
whether the link is up, and the sessions open.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from p2pboost.exceptions import TransportError
from p2pboost.metrics import CONTENT_TYPE, MISSING, EndpointMetrics, Metrics, endpoint_metrics
from p2pboost.net.node import Node

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["NodeCollector", "ProbeAnswer", "host_routes", "probing", "serve_probe"]

logger = logging.getLogger("p2pboost.app.probe")

#: A probe's answer: status, content type, body.
ProbeAnswer: TypeAlias = tuple[http.HTTPStatus, str, str]
Routes: TypeAlias = Mapping[str, Callable[[], ProbeAnswer]]
_JSON = "application/json"
#: The longest request head a probe reads (a GET line and a few headers).
_MAX_HEAD = 8192


class NodeCollector:
    """The node's counters as metric families, read from :meth:`Node.stats` at each scrape."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.node.stats()
        p = "p2pboost_node_"
        up = GaugeMetricFamily(p + "peer_up", "Whether the link to a peer is up", labels=["peer"])
        families = {
            "bytes_sent": CounterMetricFamily(p + "sent_bytes", "Bytes sent", labels=["peer"]),
            "bytes_received": CounterMetricFamily(
                p + "received_bytes", "Bytes received", labels=["peer"]
            ),
            "messages_sent": CounterMetricFamily(
                p + "sent_messages", "Messages sent", labels=["peer"]
            ),
            "messages_received": CounterMetricFamily(
                p + "received_messages", "Messages received", labels=["peer"]
            ),
            "link_errors": CounterMetricFamily(
                p + "link_errors", "Links lost with an error", labels=["peer"]
            ),
        }
        for peer, s in sorted(stats.peers.items()):
            up.add_metric([peer], 1.0 if s.connected else 0.0)
            for field, family in families.items():
                family.add_metric([peer], float(getattr(s, field)))
        yield up
        yield from families.values()
        yield GaugeMetricFamily(p + "sessions", "Sessions open", value=float(stats.sessions))
        yield GaugeMetricFamily(
            p + "buffered_bytes", "Bytes buffered (the memory bound)", value=stats.buffered_bytes
        )


def _scrape(metrics: Metrics) -> ProbeAnswer:
    text = metrics.render()
    if text is None:
        return http.HTTPStatus.NOT_IMPLEMENTED, "text/plain; charset=utf-8", MISSING + "\n"
    return http.HTTPStatus.OK, CONTENT_TYPE, text.decode()


def host_routes(node: Node, guest: str) -> dict[str, Callable[[], ProbeAnswer]]:
    """A host's probe: alive; ready while its guest's link is up; its node's metrics."""
    metrics = endpoint_metrics()
    if isinstance(metrics, EndpointMetrics):
        metrics.add_collector(NodeCollector(node))

    def health() -> ProbeAnswer:
        return http.HTTPStatus.OK, _JSON, json.dumps({"status": "ok"}) + "\n"

    def ready() -> ProbeAnswer:
        if node.is_connected(guest):
            return http.HTTPStatus.OK, _JSON, json.dumps({"status": "ready"}) + "\n"
        body = json.dumps({"status": "waiting", "guest": guest})
        return http.HTTPStatus.SERVICE_UNAVAILABLE, _JSON, body + "\n"

    return {"/healthz": health, "/readyz": ready, "/metrics": lambda: _scrape(metrics)}


def _response(status: http.HTTPStatus, content_type: str, body: str) -> bytes:
    data = body.encode()
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + data


def _answer(head: bytes, routes: Routes) -> bytes:
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return _response(http.HTTPStatus.BAD_REQUEST, "text/plain", "bad request\n")
    method, target = parts[0], parts[1].decode("ascii", "replace").split("?", 1)[0]
    if target not in routes:
        return _response(
            http.HTTPStatus.NOT_FOUND, "text/plain", f"no such path; {sorted(routes)}\n"
        )
    if method not in (b"GET", b"HEAD"):
        return _response(http.HTTPStatus.METHOD_NOT_ALLOWED, "text/plain", "GET only\n")
    status, content_type, body = routes[target]()
    out = _response(status, content_type, body)
    return out.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n" if method == b"HEAD" else out


async def serve_probe(
    listen: str, routes: Routes, ready: Callable[[str], None] | None = None
) -> None:
    """Answer GET on ``routes`` in plain HTTP at ``listen`` (loopback: the config checks it)
    until cancelled; ``ready`` gets ``http://host:port`` once listening (port 0 resolved)."""
    host, _, port = listen.rpartition(":")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10.0):
                head = await reader.readuntil(b"\r\n\r\n")
            writer.write(_answer(head, routes))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass  # a probe that hung up or sent garbage: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    try:
        server = await asyncio.start_server(handle, host.strip("[]"), int(port), limit=_MAX_HEAD)
    except OSError as exc:
        raise TransportError(
            f"cannot open the probe port {listen}: {exc.strerror or exc}"
        ) from None
    async with server:
        bound = server.sockets[0].getsockname()
        url = f"http://{listen.rpartition(':')[0]}:{bound[1]}"
        logger.info("probe: %s/healthz, /readyz and /metrics (plain HTTP, this machine only)", url)
        if ready is not None:
            ready(url)
        await asyncio.Event().wait()  # until cancelled


@contextlib.asynccontextmanager
async def probing(listen: str | None, routes: Routes) -> AsyncIterator[None]:
    """The probe port open for the body's duration (nothing when ``listen`` is None); a port
    that cannot be opened fails here, before the party serves anything."""
    if listen is None:
        yield
        return
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_probe(listen, routes, started.set_result))
    try:
        first: set[asyncio.Future[Any]] = {started, task}
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
