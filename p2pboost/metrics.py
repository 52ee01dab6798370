"""Prometheus metrics of the serving endpoint (``GET /metrics``), an optional extra.

An operator's first questions about a scoring service are how many requests it answers, how
fast, how many fail and why, and how large the batches it sends the hosts are; Prometheus is
where most of them look, so the endpoint answers ``/metrics`` in its text format. The
``prometheus-client`` package draws that text (``pip install 'p2pboost[metrics]'``); without it
the endpoint serves scores all the same and answers ``/metrics`` with ``501`` and
:data:`MISSING`, so a scrape that finds nothing says why instead of a bare 404.

Each endpoint keeps its own :class:`~prometheus_client.CollectorRegistry`, never the
process-wide default: two endpoints in one process (tests, an application embedding the
predictor) count apart, and an application's own metrics are not mixed into ours.

Names, all prefixed ``p2pboost_serve_`` (counters end in ``_total``):

* ``requests_total``: scoring requests received (each request of a list message counts);
  ``message_requests``: a histogram of requests per client message.
* ``errors_total{kind}``: requests answered with an error, by the error's type
  (``UnknownIdError``, ``InputError``, ``PeerDisconnected``, ``InternalError``, ...).
* ``request_seconds``: a histogram of the time from a message's arrival to its reply.
* ``batch_rows`` and ``batch_seconds``: histograms of the micro-batches sent to the hosts,
  in rows and in seconds (one round trip per host, then the trees).
* ``received_bytes_total`` and ``sent_bytes_total``: client message bytes (payloads).
* ``open_connections``, ``connections_opened_total``, and ``refused_total{reason}``
  (``certificate``, ``host``, ``not_allowed``, ``path``).

A party's node adds its own families through :meth:`EndpointMetrics.add_collector` (the
application's probe, :mod:`p2pboost.app._probe`): per peer, bytes and messages each way and
whether the link is up.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "MISSING",
    "EndpointMetrics",
    "Metrics",
    "NoMetrics",
    "endpoint_metrics",
    "installed",
]

#: The text format's media type (what ``prometheus_client`` writes).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The answer to ``/metrics`` (with status 501) when ``prometheus-client`` is missing.
MISSING = (
    "metrics need the prometheus-client package, which is not installed here: "
    "pip install 'p2pboost[metrics]' and restart the party"
)
#: Requests per message and rows per batch: powers of two up to the largest batch.
_SIZE_BUCKETS = tuple(float(2**k) for k in range(15))
#: Seconds: from a sub-millisecond local answer to a host that times out.
_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics(Protocol):
    """What the endpoint records; :class:`NoMetrics` when the library is missing."""

    def opened(self) -> None: ...

    def closed(self) -> None: ...

    def refused(self, reason: str) -> None: ...

    def received(self, n_bytes: int, n_requests: int) -> None: ...

    def replied(self, n_bytes: int, seconds: float, errors: Iterable[str]) -> None: ...

    def batch(self, rows: int, seconds: float) -> None: ...

    def stability(self, rows: int, psi: float | None) -> None: ...

    def render(self) -> bytes | None: ...


class NoMetrics:
    """Counts nothing; :meth:`render` is ``None`` (the endpoint answers 501 with MISSING)."""

    def opened(self) -> None:
        pass

    def closed(self) -> None:
        pass

    def refused(self, reason: str) -> None:
        pass

    def received(self, n_bytes: int, n_requests: int) -> None:
        pass

    def replied(self, n_bytes: int, seconds: float, errors: Iterable[str]) -> None:
        pass

    def batch(self, rows: int, seconds: float) -> None:
        pass

    def stability(self, rows: int, psi: float | None) -> None:
        pass

    def render(self) -> bytes | None:
        return None


class EndpointMetrics:
    """The endpoint's counters and histograms, in a registry of their own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        p = "p2pboost_serve_"
        self._requests = Counter(p + "requests", "Scoring requests received", registry=r)
        self._message_requests = Histogram(
            p + "message_requests",
            "Requests per client message",
            buckets=_SIZE_BUCKETS,
            registry=r,
        )
        self._errors = Counter(
            p + "errors", "Requests answered with an error, by kind", ["kind"], registry=r
        )
        self._latency = Histogram(
            p + "request_seconds",
            "Seconds from a message's arrival to its reply",
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self._batch_rows = Histogram(
            p + "batch_rows",
            "Rows per micro-batch sent to the hosts",
            buckets=_SIZE_BUCKETS,
            registry=r,
        )
        self._batch_seconds = Histogram(
            p + "batch_seconds",
            "Seconds per micro-batch (the hosts' round trip and the trees)",
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self._received = Counter(p + "received_bytes", "Client message bytes in", registry=r)
        self._sent = Counter(p + "sent_bytes", "Reply bytes out", registry=r)
        self._open = Gauge(p + "open_connections", "Client connections open", registry=r)
        self._window_rows = Gauge(
            p + "stability_window_rows", "Scores in the stability window", registry=r
        )
        self._window_psi = Gauge(
            p + "score_psi",
            "PSI of the window's scores against the training scores (NaN: too few rows)",
            registry=r,
        )
        self._opened = Counter(p + "connections_opened", "Client connections accepted", registry=r)
        self._refused = Counter(
            p + "refused",
            "Clients refused before the WebSocket, by reason",
            ["reason"],
            registry=r,
        )

    def opened(self) -> None:
        self._open.inc()
        self._opened.inc()

    def closed(self) -> None:
        self._open.dec()

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def received(self, n_bytes: int, n_requests: int) -> None:
        self._received.inc(n_bytes)
        self._requests.inc(n_requests)
        self._message_requests.observe(n_requests)

    def replied(self, n_bytes: int, seconds: float, errors: Iterable[str]) -> None:
        self._sent.inc(n_bytes)
        self._latency.observe(seconds)
        for kind in errors:
            self._errors.labels(kind).inc()

    def batch(self, rows: int, seconds: float) -> None:
        self._batch_rows.observe(rows)
        self._batch_seconds.observe(seconds)

    def stability(self, rows: int, psi: float | None) -> None:
        """The predictor's stability window as of the scrape (PSI NaN below its min_rows)."""
        self._window_rows.set(rows)
        self._window_psi.set(float("nan") if psi is None else psi)

    def add_collector(self, collector: Collector) -> None:
        """More families in the same answer (a party's node counters)."""
        self.registry.register(collector)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def installed() -> bool:
    """Whether ``prometheus-client`` can be imported here."""
    return importlib.util.find_spec("prometheus_client") is not None


def endpoint_metrics() -> EndpointMetrics | NoMetrics:
    """:class:`EndpointMetrics` when ``prometheus-client`` is installed, else
    :class:`NoMetrics`."""
    return EndpointMetrics() if installed() else NoMetrics()
