"""``Node.is_connected`` / ``wait_connected``: a service can tell a peer is away and wait for it."""

from __future__ import annotations

import asyncio

import pytest

from p2pboost.exceptions import InputError
from p2pboost.testing import Fabric, local_federation, wait_until


async def test_wait_connected_follows_the_link(fabric: Fabric) -> None:
    async with local_federation(fabric, ["a", "b"]) as c:
        assert c["a"].is_connected("b")
        await asyncio.wait_for(c["a"].wait_connected("b"), 1.0)  # up: returns at once
        await c["b"].close()
        await wait_until(lambda: not c["a"].is_connected("b"), within=3.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(c["a"].wait_connected("b"), 0.3)
        with pytest.raises(InputError, match="unknown peers"):
            c["a"].is_connected("zz")


async def test_wait_connected_wakes_when_the_link_returns(memory_fabric: Fabric) -> None:
    async with local_federation(memory_fabric, ["a", "b"]) as c:
        c.transports["a"].kill_all()
        waiter = asyncio.create_task(c["a"].wait_connected("b"))
        await asyncio.wait_for(waiter, 3.0)  # the node re-dials; the waiter wakes
        assert c["a"].is_connected("b")
