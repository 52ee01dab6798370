"""``predict`` waits for the other side by one setting, ``node.reconnect_timeout``.

A host running ``predict`` used to wait for its guest without end, also when the guest's
``predict`` had already failed; the guest needed its hosts within ``[serve] host_timeout``
(5 s). Both now wait ``node.reconnect_timeout`` and stop with an error that names the partner,
the setting and what to do.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from p2pboost.app._waits import first_session, hosts_up
from p2pboost.app.config import load_config
from p2pboost.app.party import run_party
from p2pboost.exceptions import PeerDisconnected
from p2pboost.hetero.model import HostModel
from p2pboost.testing import time_factor
from tests.cli.conftest import free_port, party_configs


async def test_a_host_predict_whose_guest_never_comes_stops_naming_the_cause(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    _, host_toml = party_configs(tmp_path, cert_root, port=free_port())
    text = host_toml.read_text().replace("reconnect_timeout = 20.0", "reconnect_timeout = 1.5")
    host_toml.write_text(text)
    config = load_config(host_toml).with_task("predict")
    config.model_path.parent.mkdir(parents=True)
    HostModel("f" * 16, "guest", 20, ()).save(config.model_path)
    t0 = time.perf_counter()
    with pytest.raises(PeerDisconnected) as info:
        await run_party(config)
    elapsed = time.perf_counter() - t0
    message = str(info.value)
    assert elapsed < 1.5 + 5 * time_factor(), elapsed
    assert info.value.peer == "guest"
    assert "'guest' asked for no prediction in 1.5 s" in message
    assert "if its predict stopped with an error, fix what that error names" in message
    assert "node.reconnect_timeout = 1.5 s" in message
    assert str(host_toml) in message


async def test_a_session_that_came_in_time_runs_to_its_end() -> None:
    async def answer(on_session: object) -> str:
        assert callable(on_session)
        on_session("s")
        await asyncio.sleep(0.3)  # longer than the wait: the bound is on the start only
        return "done"

    assert await first_session(answer, "guest", 0.1) == "done"


async def test_a_failing_answer_fails_at_once() -> None:
    async def answer(on_session: object) -> str:
        raise ValueError("bad model")

    with pytest.raises(ValueError, match="bad model"):
        await first_session(answer, "guest", 30.0)


class _Node:
    """Links that come up after ``delays`` seconds (never, for inf)."""

    def __init__(self, delays: dict[str, float]) -> None:
        self.delays = delays
        self.t0 = time.perf_counter()

    def is_connected(self, peer: str) -> bool:
        return time.perf_counter() - self.t0 >= self.delays[peer]

    async def wait_connected(self, peer: str) -> None:
        await asyncio.sleep(self.delays[peer])


async def test_the_guest_waits_for_late_hosts_within_the_timeout() -> None:
    node = _Node({"a": 0.05, "b": 0.2})
    await hosts_up(node, ["a", "b"], 2.0)  # type: ignore[arg-type]
    with pytest.raises(PeerDisconnected) as info:
        await hosts_up(_Node({"a": 0.0, "b": float("inf")}), ["a", "b"], 0.1)  # type: ignore[arg-type]
    assert info.value.peer == "b"
    assert str(info.value) == "'b' did not connect in 0.1 s"
