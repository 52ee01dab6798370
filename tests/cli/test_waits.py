"""What a party says while it waits: where it listens, and whom it waits for.

A listening party never printed the address it listens on (with ``listen = "...:0"`` nobody
could tell the peers where to dial), and "PSI: matching 550 ids..." was printed while the
party was only waiting for a peer that had not started. Both are reporter messages, so the
text console and ``--log-format json`` show them alike.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from p2pboost.app._progress import Tick
from p2pboost.app.config import load_config
from p2pboost.app.party import run_party
from p2pboost.testing import time_factor, wait_until
from tests.cli.conftest import free_port, party_configs


class _Messages:
    """A reporter that keeps every message."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    def begin(self, label: str, total: int) -> None:
        self.lines.append(label)

    def step(self, label: str, record: object = None) -> None:
        self.lines.append(label)

    def progress(self, tick: Tick) -> None:
        self.lines.append(tick.text())

    def end(self, message: str) -> None:
        self.lines.append(message)


async def _until_waiting(config_path: Path, task: str) -> list[str]:
    """Run the party until it says it waits for its peer (who never comes); its messages."""
    messages = _Messages()
    run = asyncio.create_task(run_party(load_config(config_path).with_task(task), messages))
    try:
        await wait_until(
            lambda: run.done() or any("waiting for" in m for m in messages.lines),
            within=20 * time_factor(),
        )
        assert not run.done(), messages.lines
    finally:
        run.cancel()
        try:
            await run
        except asyncio.CancelledError:
            pass
    return messages.lines


async def test_a_listening_party_says_where_and_waits_for_its_peer_by_name(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    port = free_port()
    _, host_toml = party_configs(tmp_path, cert_root, port=port)
    lines = await _until_waiting(host_toml, "psi")
    assert lines[0] == f"listening on wss://127.0.0.1:{port}", lines
    assert "PSI: waiting for guest (it connects here) to answer..." in lines
    assert not [m for m in lines if "matching" in m], lines  # nobody answered: nothing matched


async def test_a_dialling_party_names_the_address_it_waits_for(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    port = free_port()  # nobody listens there
    guest_toml, _ = party_configs(tmp_path, cert_root, port=port)
    lines = await _until_waiting(guest_toml, "psi")
    assert not [m for m in lines if m.startswith("listening")], lines  # it only dials
    assert f"PSI: waiting for host at wss://127.0.0.1:{port} to answer..." in lines
    assert not [m for m in lines if "matching" in m], lines
