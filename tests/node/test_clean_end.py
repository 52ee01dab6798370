"""A clean end reads as one: a peer's normal close and a stop asked for are no failures.

A run that ends well used to leave "connection ... ended: peer 'a' closed the connection, code
1000" in the log (a WebSocket's normal close, worded like a fault), and a party stopped with
Ctrl-C or SIGTERM logged its cancelled session as "failed: peer code raised CancelledError"
at warning level, on its own side and on its peers'.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from p2pboost.exceptions import SessionClosed
from p2pboost.net._mux import STOPPED
from p2pboost.net.node import Node
from p2pboost.testing import FAST, Fabric, local_federation, wait_until


async def test_a_peer_closing_normally_is_logged_as_a_normal_close(
    node_federation: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="p2pboost")
    async with Node(
        "b", listen="127.0.0.1:0", peers={"a": None}, tls=node_federation / "b", config=FAST
    ) as b:
        assert b.address is not None
        async with Node("a", peers={"b": b.address}, tls=node_federation / "a", config=FAST) as a:
            async with a.session("run", peers=["b"]) as s:
                await s.channel("b").send("hello")
                async with b.session("run", peers=["a"]) as t:
                    assert await t.channel("a").recv() == "hello"
        # a has closed its node: b sees the WebSocket's normal close (code 1000)
        await wait_until(lambda: any("'a' closed" in r.message for r in caplog.records))
    b_lines = [r for r in caplog.records if r.getMessage().startswith("b:")]
    assert any(
        r.levelno == logging.INFO and r.getMessage() == "b: 'a' closed its connection normally"
        for r in b_lines
    ), [r.getMessage() for r in b_lines]
    assert not [r.getMessage() for r in b_lines if "code 1000" in r.getMessage()]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_cancelled_session_is_a_clean_stop_and_the_peer_learns_why(
    memory_fabric: Fabric, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="p2pboost")
    async with local_federation(memory_fabric, ["a", "b"]) as fed:
        b_side = fed["b"].session("serve", peers=["a"])
        started = asyncio.Event()

        async def serving() -> None:
            async with fed["a"].session("serve", peers=["b"]) as s:
                await s.channel("b").send("up")
                started.set()
                await asyncio.Event().wait()  # serves until stopped

        task = asyncio.create_task(serving())
        await started.wait()
        assert await b_side.channel("a").recv() == "up"
        task.cancel()  # what SIGTERM does to the party's task
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(SessionClosed, match="aborted by peer 'a'") as info:
            await b_side.channel("a").recv()
        assert info.value.reason == STOPPED
        assert "CancelledError" not in str(info.value)
        await b_side.close()
    a_lines = [r for r in caplog.records if r.getMessage().startswith("a:")]
    assert any(
        r.levelno == logging.INFO and r.getMessage() == "a: session 'serve' stopped here"
        for r in a_lines
    ), [r.getMessage() for r in a_lines]
    assert not [r.getMessage() for r in a_lines if r.levelno >= logging.WARNING]
