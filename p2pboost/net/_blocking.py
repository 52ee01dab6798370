"""Blocking facades over coroutines that need a running node.

The estimators' ``fit`` / ``predict`` (vertical and horizontal alike) run their ``a``-prefixed
coroutine here, inside ``async with node`` on a fresh event loop. It lives with the node, not
with the protocols: it knows nothing of any protocol, only the node's lifecycle and the event
loop that the node's I/O and timers run on (the node owns I/O and time), so every layer above
``net`` may use it and none below needs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from p2pboost.exceptions import LocalProtocolError
from p2pboost.net.node import Node

__all__ = ["run_with_node"]

R = TypeVar("R")


def run_with_node(node: Node, call: Coroutine[Any, Any, R]) -> R:
    """Run ``call`` inside ``async with node`` on a fresh event loop.

    Refuses (closing ``call`` so no "never awaited" warning follows) when an event loop is
    already running in this thread: blocking it would freeze every session of that loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        call.close()
        raise LocalProtocolError("an event loop is running here: use the a-prefixed method")

    async def main() -> R:
        async with node:
            return await call

    return asyncio.run(main())
