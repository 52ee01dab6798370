"""gather_or_cancel: no task outlives the call, whatever ends it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from p2pboost.protocols._tasks import gather_or_cancel


async def test_results_in_order() -> None:
    async def value(x: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return x

    assert await gather_or_cancel(value(1, 0.02), value(2, 0.0), value(3, 0.01)) == [1, 2, 3]


async def test_first_failure_cancels_and_awaits_the_rest() -> None:
    ended: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("slow")

    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):  # the original exception, not a group
        await gather_or_cancel(slow(), fails())
    assert ended == ["slow"]  # cancelled *and* finished before the call returned


async def test_cancelling_the_caller_ends_every_task_first() -> None:
    ended: list[int] = []
    started = asyncio.Event()

    async def forever(i: int) -> None:
        try:
            started.set()
            await asyncio.sleep(10)
        finally:
            ended.append(i)

    caller = asyncio.ensure_future(gather_or_cancel(forever(1), forever(2)))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert sorted(ended) == [1, 2]


async def test_a_bad_argument_leaves_nothing_running_or_never_awaited() -> None:
    ended: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("slow")

    async def never() -> None:  # pragma: no cover - closed before it runs
        ended.append("never")

    before = asyncio.all_tasks()
    with pytest.raises(TypeError):
        await gather_or_cancel(slow(), cast(Any, 42), never())
    # The started task was cancelled and awaited (before its first step, so its body never
    # ran); the coroutine after the bad argument was closed (an unawaited one would warn, an
    # error under this suite's filterwarnings).
    assert asyncio.all_tasks() == before
    assert ended == []
