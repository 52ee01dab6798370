"""``/metrics``, ``/readyz`` and ``/healthz`` of the endpoint: Prometheus text that parses,
counters that move with the requests, and a clear 501 where ``prometheus-client`` is missing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect as ws_connect

from p2pboost import metrics as metrics_module
from p2pboost.certs import TLSConfig
from p2pboost.hetero.inference.endpoint import probe_routes
from p2pboost.metrics import MISSING, EndpointMetrics, NoMetrics, endpoint_metrics
from p2pboost.testing import Fabric
from tests.serving import test_endpoint
from tests.serving.conftest import Trained
from tests.serving.test_endpoint import _http_get, _ssl, ask, request, served

#: The endpoint tests' certificates: an application's, and the guest's own.
app_tls = test_endpoint.app_tls
guest_tls = test_endpoint.guest_tls


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the text, keyed by name and labels (parsed by prometheus_client)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def value(
    found: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_parse_and_move_with_requests(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    async with served(memory_fabric, trained, guest_tls) as (_, url):
        status, before_text = await _http_get(url, "/metrics", _ssl(app_tls))
        assert status == 200
        before = samples(before_text)
        async with ws_connect(url, ssl=_ssl(app_tls)) as ws:
            await ask(ws, json.dumps(request(trained, 1)))
            replies = await ask(ws, json.dumps([request(trained, 2), {"id": 1}]))
            await ask(ws, json.dumps({"id": 7, "features": [0.0] * 10}))  # unknown id
            assert "score" in replies[0]
            assert replies[1]["error"]["type"] == "InputError"
            status, during_text = await _http_get(url, "/metrics", _ssl(app_tls))
        during = samples(during_text)
        await _http_get(url, "/nothing", _ssl(app_tls))
        after = samples((await _http_get(url, "/metrics", _ssl(app_tls)))[1])
    p = "p2pboost_serve_"
    assert value(before, p + "requests_total") == 0
    assert value(during, p + "requests_total") == 4
    assert value(during, p + "message_requests_count") == 3
    assert value(during, p + "errors_total", kind="InputError") == 1
    assert value(during, p + "errors_total", kind="UnknownIdError") == 1
    assert value(during, p + "request_seconds_count") == 3
    assert value(during, p + "request_seconds_sum") > 0
    assert value(during, p + "batch_rows_count") >= 2  # the scored rows' micro-batches
    assert value(during, p + "batch_rows_sum") >= 3
    assert value(during, p + "received_bytes_total") > 100
    assert value(during, p + "sent_bytes_total") > 50
    assert value(during, p + "open_connections") == 1
    assert value(after, p + "open_connections") == 0
    assert value(after, p + "connections_opened_total") == 1
    assert value(after, p + "refused_total", reason="path") == 1


async def test_readyz_answers_200_through_the_client_certificate(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    async with served(memory_fabric, trained, guest_tls) as (_, url):
        status, body = await _http_get(url, "/readyz", _ssl(app_tls))
    assert (status, json.loads(body)) == (200, {"status": "ready"})


class _Node:
    def __init__(self, up: set[str]) -> None:
        self.up = up

    def is_connected(self, peer: str) -> bool:
        return peer in self.up


def test_readyz_names_the_hosts_away() -> None:
    predictor = SimpleNamespace(
        node=_Node({"b"}), model=SimpleNamespace(hosts=["b", "c"]), stability=lambda: None
    )
    ready = probe_routes(predictor, NoMetrics())["/readyz"]  # type: ignore[arg-type]
    status, content_type, body = ready()
    assert (status, content_type) == (503, "application/json")
    assert json.loads(body) == {"status": "waiting", "hosts_away": ["c"]}
    predictor.node.up.add("c")
    assert ready()[0] == 200


async def test_without_prometheus_client_metrics_answer_501(
    memory_fabric: Fabric,
    trained: Trained,
    app_tls: TLSConfig,
    guest_tls: TLSConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_module, "installed", lambda: False)
    assert isinstance(endpoint_metrics(), NoMetrics)
    async with served(memory_fabric, trained, guest_tls) as (_, url):
        status, body = await _http_get(url, "/metrics", _ssl(app_tls))
        async with ws_connect(url, ssl=_ssl(app_tls)) as ws:  # scores all the same
            reply = await ask(ws, json.dumps(request(trained, 1)))
    assert status == 501
    assert body.decode().strip() == MISSING
    assert "pip install 'p2pboost[metrics]'" in MISSING
    assert "score" in reply


def test_endpoints_count_apart() -> None:
    a, b = EndpointMetrics(), EndpointMetrics()
    a.received(10, 2)
    assert value(samples(a.render()), "p2pboost_serve_requests_total") == 2
    assert value(samples(b.render()), "p2pboost_serve_requests_total") == 0
