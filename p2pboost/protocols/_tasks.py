"""Structured concurrency for protocol coroutines."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import Any

__all__ = ["gather_or_cancel"]


async def gather_or_cancel(*aws: Awaitable[Any]) -> list[Any]:
    """Run ``aws`` concurrently; the first failure cancels the rest and propagates unchanged.

    Unlike :func:`asyncio.gather`, no task outlives the call, and unlike a
    :class:`asyncio.TaskGroup` the caller gets the original exception (say a
    ``RemoteProtocolError`` naming the peer) rather than an exception group.

    The tasks are started inside the ``try``: should starting one fail (an argument that is
    not awaitable), those already started are cancelled and awaited like any others, and the
    coroutines not started yet are closed, so none is left running or never awaited.
    """
    tasks: list[asyncio.Future[Any]] = []
    try:
        for aw in aws:
            tasks.append(asyncio.ensure_future(aw))  # noqa: PERF401 - one at a time, see above
        return list(await asyncio.gather(*tasks))
    finally:
        for left in aws[len(tasks) :]:
            if inspect.iscoroutine(left):
                left.close()
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
