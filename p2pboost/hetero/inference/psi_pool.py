"""The executor of the PSIs a serving party runs to align batches (``align="psi"``).

Why not the PSI protocol's own default: without an executor,
:func:`~p2pboost.protocols.psi.psi_guest` and :func:`~p2pboost.protocols.psi.psi_host` start a
process pool for the run and shut it down after, which suits one PSI before training. A
serving party runs one PSI per aligned batch, and the guest bounds each by ``host_timeout``
(5 s by default): starting ``spawn`` processes on both sides for every batch cost seconds
under load, most of that bound, for sets that take milliseconds to blind. So one
:class:`PsiPool` serves every PSI of a predictor (or of a host's ``serve_host``):

* a caller's executor (``[compute]``, a pool of the application's) is used as it is;
* sets of at most :data:`INLINE_IDS` ids are hashed and blinded in one thread of this
  process: no process to start, and X25519 on a few thousand points takes a few tens of
  milliseconds, off the event loop all the same;
* larger sets share one process pool, started at the first of them and kept for every later
  PSI until the owner closes (a PSI runs after another, or beside it on other cores).

The guest warms its processes (:meth:`PsiPool.ready`) before ``host_timeout`` starts, so the
bound measures the host and the wire, not this machine's process start-up.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor, ThreadPoolExecutor

from p2pboost import workers
from p2pboost.workers import AnyExecutor

__all__ = ["INLINE_IDS", "PsiPool"]

#: Sets up to this many ids are blinded in a thread of this process, not in a process pool.
INLINE_IDS = 4096


def _noop() -> None:
    """A task that makes a worker process start (the pool spawns them on demand)."""


class PsiPool:
    """The executor for a set of ``n`` ids, given, in-process or pooled (module docstring)."""

    def __init__(self, executor: AnyExecutor | None = None) -> None:
        self.given = executor
        self._thread: ThreadPoolExecutor | None = None
        self._pool: Executor | None = None
        self._warm = False
        #: Process pools this object started (at most one; what tests count).
        self.started = 0

    def for_ids(self, n: int) -> AnyExecutor:
        """The executor a PSI over ``n`` of this party's ids runs on."""
        if self.given is not None:
            return self.given
        if n <= INLINE_IDS:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="p2pboost-psi")
            return self._thread
        if self._pool is None:
            self._pool = workers.process_pool(workers.default_workers())
            self.started += 1
        return self._pool

    async def ready(self, n: int) -> AnyExecutor:
        """:meth:`for_ids`, with a new pool's processes started before this returns."""
        executor = self.for_ids(n)
        if executor is self._pool and not self._warm:
            loop = asyncio.get_running_loop()
            count = workers.default_workers()
            await asyncio.gather(*(loop.run_in_executor(self._pool, _noop) for _ in range(count)))
            self._warm = True
        return executor

    async def close(self) -> None:
        """Shut down what this object started (in a thread: the loop keeps serving)."""
        started = [e for e in (self._thread, self._pool) if e is not None]
        self._thread = self._pool = None
        for executor in started:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
