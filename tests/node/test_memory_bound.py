"""One large message costs the receiver at most the documented bound: about twice its size
(the message assembled once from its fragments, plus what decoding makes of it), measured as
the peak RSS of a receiving party in a process of its own, over mutual TLS on loopback."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from p2pboost import certs
from p2pboost.net.config import NodeConfig
from p2pboost.net.node import Node

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
#: The message: one array as large as ``max_message_bytes`` allows (minus the encoding).
SIZE = 64 * MiB
#: docs/explanation/node.md: a message of M bytes raises the receiver's peak by at most
#: 2 M (assembly buffer + decoded value) plus fragments in flight; 0.25 M + 16 MiB of slack
#: for the allocator. Joining the fragments at the end (as before) measured up to 2.65 M.
BOUND = 2.25 * SIZE + 16 * MiB


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux only")
async def test_one_large_message_costs_at_most_twice_its_size(tmp_path: Path) -> None:
    certs.init(tmp_path, ["a", "b"])
    receiver = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.node._big_receiver",
        str(tmp_path),
        str(SIZE),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert receiver.stdout is not None
    try:
        address = json.loads(await receiver.stdout.readline())["address"]
        config = NodeConfig(max_message_bytes=SIZE + MiB)
        async with Node("a", peers={"b": address}, tls=tmp_path / "a", config=config) as node:
            async with node.session("big", peers=["b"]) as session:
                channel = session.channel("b")
                await channel.send("hello")
                await channel.send(np.ones(SIZE // 8))
                assert await channel.recv() == "ok"
        report = json.loads(await receiver.stdout.readline())
    finally:
        async with asyncio.timeout(30):
            await receiver.communicate()
    assert report["nbytes"] == SIZE
    increase = report["after"] - report["before"]
    assert increase <= BOUND, f"{increase / MiB:.0f} MiB for a {SIZE / MiB:.0f} MiB message"
