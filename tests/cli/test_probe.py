"""The probe port: plain HTTP on loopback, ``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from p2pboost.app._probe import host_routes, serve_probe
from p2pboost.app.config import load_config
from p2pboost.exceptions import ConfigError
from p2pboost.testing import MemoryFabric, local_federation
from tests.cli.conftest import free_port, party_configs


async def get(url: str, path: str, method: str = "GET") -> tuple[int, str]:
    host, port = url.split("//")[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = await reader.read()  # the probe closes after one answer
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


@contextlib.asynccontextmanager
async def probe(routes: dict) -> AsyncIterator[str]:
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_probe("127.0.0.1:0", routes, url.set_result))
    try:
        yield await url
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_host_probe_answers_health_readiness_and_node_metrics() -> None:
    async with local_federation(MemoryFabric(), ["guest", "host"]) as fed:
        routes = host_routes(fed["host"], "guest")
        async with probe(routes) as url:
            health = await get(url, "/healthz")
            ready = await get(url, "/readyz")
            status, text = await get(url, "/metrics")
            head_only = await get(url, "/healthz", "HEAD")
            missing = await get(url, "/other")
            posted = await get(url, "/healthz", "POST")
    assert health == (200, '{"status": "ok"}\n')
    assert json.loads(ready[1]) == {"status": "ready"}
    assert status == 200
    samples = {
        (s.name, tuple(s.labels.values())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("p2pboost_node_peer_up", ("guest",))] == 1
    assert ("p2pboost_node_sent_bytes_total", ("guest",)) in samples
    assert ("p2pboost_node_sessions", ()) in samples
    assert head_only == (200, "")
    assert missing[0] == 404
    assert posted[0] == 405


async def test_a_host_probe_is_not_ready_without_its_guest() -> None:
    async with local_federation(MemoryFabric(), ["guest", "host"]) as fed:
        await fed["guest"].close()
        routes = host_routes(fed["host"], "guest")
        for _ in range(100):
            status, _, body = routes["/readyz"]()
            if status == 503:
                break
            await asyncio.sleep(0.05)
    assert status == 503
    assert json.loads(body) == {"status": "waiting", "guest": "guest"}


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "10.0.0.1:9464", "127.0.0.1:x"])
def test_the_probe_listens_on_loopback_only(tmp_path: Path, cert_root: Path, address: str) -> None:
    guest_toml, _ = party_configs(tmp_path, cert_root, port=free_port())
    guest_toml.write_text(
        guest_toml.read_text().replace("[serve]\n", f'[serve]\nprobe = "{address}"\n')
    )
    with pytest.raises(ConfigError, match=r"serve.*probe.*plain HTTP.*127\.0\.0\.1:PORT"):
        load_config(guest_toml)
    ok = guest_toml.read_text().replace(address, "127.0.0.1:9464")
    guest_toml.write_text(ok)
    assert load_config(guest_toml).serve.probe == "127.0.0.1:9464"
