"""The guest's endpoint for external clients, over real TLS on loopback.

The party-to-party side runs on the in-memory network (its own tests cover TLS there); what is
under test is the client side: mutual TLS, the JSON protocol, pipelining, validation and
isolation between clients. Scores are compared exactly with ``GuestPredictor.predict``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosedError, InvalidHandshake, InvalidStatus

from p2pboost import certs
from p2pboost.certs import TLSConfig
from p2pboost.exceptions import ConfigError
from p2pboost.hetero.inference.endpoint import EndpointLimits, serve_endpoint, stream_scores
from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.hetero.inference.predictor import GuestPredictor
from p2pboost.testing import Fabric, local_federation
from tests.serving.conftest import Trained
from tests.serving.test_serving import CONFIG, serving


@pytest.fixture(scope="session")
def app_tls(node_federation: Path, tmp_path_factory: pytest.TempPathFactory) -> TLSConfig:
    """An application's certificate, obtained as users do: request, then the CA signs."""
    out = tmp_path_factory.mktemp("app")
    csr = certs.request("app", out)
    certs.sign(csr, node_federation / "ca", out / "cert.pem", party_id="app")
    shutil.copy(node_federation / "ca" / "ca.pem", out / "ca.pem")
    return TLSConfig.from_dir(out)


@pytest.fixture
def guest_tls(node_federation: Path) -> TLSConfig:
    """The guest's own certificate: what the endpoint presents."""
    return TLSConfig.from_dir(node_federation / "a")


@contextlib.asynccontextmanager
async def endpoint(
    predictor: GuestPredictor, listen: str = "127.0.0.1:0", **kwargs: Any
) -> AsyncIterator[str]:
    """Run ``serve_endpoint`` in a task; yield its URL once it listens."""
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_endpoint(predictor, listen, ready=url.set_result, **kwargs))
    try:
        waiting: set[asyncio.Future[Any]] = {url, task}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
        yield url.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def served(
    fabric: Fabric, trained: Trained, tls: TLSConfig | None, **kwargs: Any
) -> AsyncIterator[tuple[GuestPredictor, str]]:
    """Hosts answering over ``fabric``, the guest's predictor and its endpoint."""
    predictor_kw = {k: kwargs.pop(k) for k in ("guest_store", "max_batch") if k in kwargs}
    async with (
        local_federation(fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, **predictor_kw) as p,
        endpoint(p, tls=tls, **kwargs) as url,
    ):
        yield p, url


def _ssl(tls: TLSConfig) -> ssl.SSLContext:
    return certs.client_context(tls)


def request(trained: Trained, row: int, **extra: Any) -> dict[str, Any]:
    return {"id": int(trained.ids[row]), "features": _json_row(trained.guest_X(row)), **extra}


def _json_row(x: np.ndarray) -> list[float | None]:
    return [None if np.isnan(v) else float(v) for v in x.tolist()]


async def ask(ws: ClientConnection, message: str | bytes) -> Any:
    await ws.send(message)
    return json.loads(await ws.recv())


@pytest.mark.slow
async def test_pipelined_replies_are_in_order_and_equal_predict(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    rows = np.random.default_rng(7).integers(0, trained.ids.size, 200)
    rows[50] = rows[10]  # the same id twice in flight
    async with served(memory_fabric, trained, guest_tls) as (p, url):
        replies = [
            r
            async for r in stream_scores(
                url, (request(trained, r) for r in rows), tls=app_tls, server_party="a"
            )
        ]
        batches = p.stats().batches
        grouped = [  # 30 requests per message: list messages, list replies, flattened
            r
            async for r in stream_scores(
                url, [request(trained, r) for r in rows], group=30, tls=app_tls
            )
        ]
        expected = [await p.predict(int(trained.ids[r]), trained.guest_X(r)) for r in rows]
    assert [r["id"] for r in replies] == trained.ids[rows].tolist()
    assert [r["score"] for r in replies] == expected
    assert grouped == replies
    assert batches < 100  # pipelined requests share micro-batches


async def test_a_list_message_gets_a_list_reply(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    async with (
        served(memory_fabric, trained, guest_tls) as (p, url),
        ws_connect(url, ssl=_ssl(app_tls)) as ws,
    ):
        replies = await ask(ws, json.dumps([request(trained, 3), {"id": 1}, request(trained, 4)]))
        expected = [await p.predict(int(trained.ids[r]), trained.guest_X(r)) for r in (3, 4)]
    assert [r.get("score") for r in replies] == [expected[0], None, expected[1]]
    assert replies[1]["error"]["type"] == "InputError"


BAD: list[tuple[str | bytes, str, str]] = [
    ("{not json", "InputError", "invalid JSON"),
    ('{"id": 1, "features": [NaN]}', "InputError", "invalid JSON"),
    ("[" * 100_000 + "]" * 100_000, "InputError", "invalid JSON"),
    ('"just a string"', "InputError", "must be a JSON object"),
    ('{"features": []}', "InputError", 'needs an "id"'),
    ('{"id": 1.5, "features": []}', "InputError", "integer or a string"),
    ('{"id": true}', "InputError", "integer or a string"),
    ('{"id": 99999999999999999999999}', "InputError", "64 bits"),
    ('{"id": 1000, "feature": []}', "InputError", "unknown request key(s): feature"),
    ('{"id": 1000}', "InputError", "guest_store"),
    ('{"id": 1000, "features": [1, 2]}', "InputError", "expected 10 guest features, got 2"),
    ('{"id": 1000, "features": {"a": 1}}', "InputError", "must be a list"),
    ('{"id": 1000, "features": [1,2,3,4,5,6,7,8,9,"x"]}', "InputError", "numbers or null"),
    ('{"id": 1000, "features": [1,2,3,4,5,6,7,8,9,1e999]}', "InputError", "finite"),
    ('{"id": 1000, "features": [1,2,3,4,5,6,7,8,9,' + "9" * 400 + "]}", "InputError", "range"),
    (b"\x00binary", "InputError", "JSON text"),
]


async def test_bad_requests_get_error_replies_and_the_connection_goes_on(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    async with (
        served(memory_fabric, trained, guest_tls) as (p, url),
        ws_connect(url, ssl=_ssl(app_tls), max_size=None) as ws,
    ):
        for message, kind, text in BAD:
            reply = await ask(ws, message)
            assert reply["error"]["type"] == kind, message
            assert text in reply["error"]["message"], (message, reply)
        unknown = await ask(ws, json.dumps({"id": 7, "features": [0.0] * 10}))
        good = await ask(ws, json.dumps(request(trained, 5)))
        expected = await p.predict(int(trained.ids[5]), trained.guest_X(5))
    assert unknown["id"] == 7
    assert unknown["error"]["type"] == "UnknownIdError"
    assert "no features for 1 requested id(s): 7" in unknown["error"]["message"]
    assert good == {"id": int(trained.ids[5]), "score": expected}


async def test_a_list_message_is_checked_as_its_requests_one_by_one(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    """A list message's rows are validated together (one conversion): every request must
    still get the reply it gets alone, in place, whatever its neighbours hold."""
    objects = [m for m, _, text in BAD if isinstance(m, str) and text != "invalid JSON"]
    goods = [json.dumps(request(trained, r)) for r in (3, 4, 4)]
    with_null = request(trained, 6)
    with_null["features"][2] = None
    members = [goods[0], *objects, goods[1], json.dumps(with_null), '"x"', "7", goods[2]]
    async with (
        served(memory_fabric, trained, guest_tls) as (_, url),
        ws_connect(url, ssl=_ssl(app_tls), max_size=None) as ws,
    ):
        alone = [await ask(ws, m) for m in members]
        together = await ask(ws, "[" + ",".join(members) + "]")
        clean = await ask(ws, "[" + ",".join(goods) + "]")  # the one-conversion path
    assert together == alone
    assert clean == [alone[0], alone[len(objects) + 1], alone[-1]]
    assert sum("score" in r for r in together) == 4


async def test_a_garbage_client_does_not_affect_another(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    rows = np.arange(300) % trained.ids.size
    limits = EndpointLimits(max_message_bytes=4096)
    async with served(memory_fabric, trained, guest_tls, limits=limits, max_batch=32) as (p, url):
        first = [r async for r in stream_scores(url, [request(trained, 0)], tls=app_tls)]
        assert "score" in first[0]  # the endpoint now knows ids are integers

        async def garbage() -> None:
            async with ws_connect(url, ssl=_ssl(app_tls), max_size=None) as ws:
                for i in range(100):
                    await ws.send(json.dumps({"id": f"x{i}", "features": [0.0] * 10}))
                    await ws.send(json.dumps({"id": 10**6 + i, "features": [0.0] * 10}))
                    await ws.send("][")
                replies = [json.loads(await ws.recv()) for _ in range(300)]
                assert {r["error"]["type"] for r in replies} == {"InputError", "UnknownIdError"}
                await ws.send("x" * 5000)  # over the size limit: this connection is closed
                with pytest.raises(ConnectionClosedError) as info:
                    await ws.recv()
                assert info.value.sent is not None
                assert info.value.sent.code == 1009

        async def good() -> list[dict[str, Any]]:
            reqs = (request(trained, int(r)) for r in rows)
            return [r async for r in stream_scores(url, reqs, tls=app_tls)]

        _, replies = await asyncio.gather(garbage(), good())
        expected = [await p.predict(int(trained.ids[r]), trained.guest_X(r)) for r in rows]
    assert [r.get("score") for r in replies] == expected


async def test_features_may_come_from_the_guest_store(
    memory_fabric: Fabric, trained: Trained
) -> None:
    store = ArrayStore(trained.ids, trained.guest_X())
    async with served(memory_fabric, trained, None, allow_plaintext=True, guest_store=store) as (
        p,
        url,
    ):
        assert url.startswith("ws://127.0.0.1:")
        reqs = [{"id": int(trained.ids[i])} for i in range(20)] + [{"id": "abc"}]
        replies = [r async for r in stream_scores(url, reqs)]
        expected = [await p.predict(int(trained.ids[i])) for i in range(20)]
    assert [r["score"] for r in replies[:20]] == expected
    assert replies[20]["error"] == {
        "type": "InputError",
        "message": "ids on this endpoint are integers",
    }


async def test_clients_without_a_federation_certificate_are_refused(
    memory_fabric: Fabric,
    trained: Trained,
    app_tls: TLSConfig,
    guest_tls: TLSConfig,
    node_federation: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    no_cert = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    no_cert.check_hostname = False
    no_cert.load_verify_locations(app_tls.ca_file)
    async with served(memory_fabric, trained, guest_tls, clients={"app", "b"}) as (_, url):
        with pytest.raises((InvalidHandshake, OSError)):  # TLS 1.3: the alert may be lost
            await ws_connect(url, ssl=no_cert, open_timeout=5)
        assert "refused a client in the TLS handshake: the client presented no certificate" in (
            caplog.text
        )
        host = TLSConfig.from_dir(node_federation / "b")  # a host must not see scores
        with pytest.raises(InvalidStatus) as info:
            await ws_connect(url, ssl=_ssl(host))
        assert info.value.response.status_code == 403
        assert b"'b' is a host of this model" in info.value.response.body
        with pytest.raises(ConfigError, match="needs tls"):
            await anext(stream_scores(url, []))


async def test_plaintext_is_opt_in_and_loopback_only(
    memory_fabric: Fabric, trained: Trained
) -> None:
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained) as p,
    ):
        with pytest.raises(ConfigError, match="needs TLS"):
            await serve_endpoint(p, "127.0.0.1:0")
        for listen in ("0.0.0.0:0", "192.0.2.1:0", "[::]:0", "example.org:0"):
            with pytest.raises(ConfigError, match="refusing plaintext"):
                await serve_endpoint(p, listen, allow_plaintext=True)
        with pytest.raises(ConfigError, match="invalid listen address"):
            await serve_endpoint(p, "127.0.0.1", allow_plaintext=True)


async def _http_get(url: str, path: str, context: ssl.SSLContext | None) -> tuple[int, bytes]:
    host, port = url.split("//")[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = await reader.readexactly(length)
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return int(head.split()[1]), body


async def test_healthz_answers_plain_http(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    async with served(memory_fabric, trained, guest_tls) as (_, url):
        status, body = await _http_get(url, "/healthz", _ssl(app_tls))
        assert status == 200
        assert json.loads(body)["status"] == "ok"
        status, _ = await _http_get(url, "/nothing", _ssl(app_tls))
        assert status == 404
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained) as p,
    ):
        async with endpoint(p, allow_plaintext=True) as url:
            status, body = await _http_get(url, "/healthz", None)
    assert status == 200
    assert json.loads(body)["batches"] == 0


async def test_browsers_are_refused(
    memory_fabric: Fabric, trained: Trained, app_tls: TLSConfig, guest_tls: TLSConfig
) -> None:
    async with served(memory_fabric, trained, guest_tls) as (_, url):
        with pytest.raises(InvalidStatus) as info:
            await ws_connect(url, ssl=_ssl(app_tls), origin="https://evil.example")  # type: ignore[arg-type]
    assert info.value.response.status_code == 403


def test_scores_become_json_numbers_or_lists() -> None:
    """Margins of a multi-output model (and the benchmark's ``output="margin"``) are arrays:
    they must reach the client as lists of plain floats, single scores as numbers."""
    from p2pboost.hetero.inference.endpoint._requests import _score_json

    assert _score_json(0.25) == 0.25
    assert _score_json(np.float64(0.5)) == 0.5
    assert _score_json(np.array(0.75)) == 0.75
    assert _score_json(np.array([1.5, -2.0])) == [1.5, -2.0]
    assert all(type(v) is float for v in _score_json(np.array([1.5, -2.0])))  # type: ignore[union-attr]
    assert json.dumps(_score_json(np.array([[1.0], [2.0]]))) == "[1.0, 2.0]"
