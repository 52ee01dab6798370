"""Structured concurrency for protocol coroutines."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["gather_or_cancel"]


async def gather_or_cancel(*aws: Awaitable[Any]) -> list[Any]:
    """Run ``aws`` concurrently; the first failure cancels the rest and propagates unchanged.

    Unlike :func:`asyncio.gather`, no task outlives the call, and unlike a
    :class:`asyncio.TaskGroup` the caller gets the original exception (say a
    ``RemoteProtocolError`` naming the peer) rather than an exception group.
    """
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
