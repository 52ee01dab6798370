"""Process pools for CPU-heavy work (encryption, PSI blinding), kept off the event loop.

Why a lower priority: a party's event loop carries heart-beats, acknowledgements and every
other session. If crypto workers ran at the same priority on a machine with as many workers as
cores, the scheduler would share each core between a worker and the loop, and the loop could
wait a whole time slice (tens of milliseconds) for its turn. Workers therefore lower their own
scheduling priority (``os.nice``) when they start: they still use every idle cycle, but the loop
runs the moment it has something to do.

Pools use the ``spawn`` start method: ``fork`` from a process with running threads (the event
loop's executor threads, OpenSSL's) can deadlock, and spawn behaves the same on every platform.
Scripts that create a pool need the usual ``if __name__ == "__main__":`` guard.

Every protocol takes an optional ``executor`` and otherwise starts its own pool:
:func:`owned_executor` is the one place that decides, and shuts an own pool down without
blocking the event loop (a pool's shutdown waits for its workers to exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

__all__ = ["WORKER_NICENESS", "default_workers", "owned_executor", "process_pool"]

#: How much workers lower their priority (0 = normal, 19 = lowest on Linux).
WORKER_NICENESS = 10


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _start_worker(initializer: Callable[..., object] | None, initargs: tuple[Any, ...]) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not permitted, or no os.nice
        os.nice(WORKER_NICENESS)
    if initializer is not None:
        initializer(*initargs)


def process_pool(
    workers: int | None = None,
    *,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
) -> ProcessPoolExecutor:
    """A spawn-based pool whose workers run at lower priority, then call ``initializer``."""
    return ProcessPoolExecutor(
        max_workers=workers or default_workers(),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(initializer, initargs),
    )


@contextlib.asynccontextmanager
async def owned_executor(
    executor: Executor | None, workers: int | None = None
) -> AsyncIterator[tuple[Executor, int]]:
    """``(executor, workers)`` for a protocol run.

    A caller's ``executor`` is used as it is and left running (``workers`` then says how many
    tasks to keep in flight; default: one per core). Without one, a fresh pool of ``workers``
    processes (default: one per core) is started and shut down on exit, in a thread, so the
    event loop keeps serving the node's other sessions meanwhile.
    """
    n = workers or default_workers()
    if executor is not None:
        yield executor, n
        return
    pool = process_pool(n)
    try:
        yield pool, n
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
