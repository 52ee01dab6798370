"""Where a party's CPU-heavy work runs: a process pool on its machine, or a Dask cluster.

Encryption, ciphertext histograms, decryption and PSI blinding run as tasks of an
:class:`~concurrent.futures.Executor`, never on the event loop. Two kinds are supported:

* a local process pool (:func:`process_pool`, :class:`PinnedPool`): the default, started and
  shut down by the protocols themselves (:mod:`p2pboost.workers._local` says why spawn, lower
  priority and a watch on the parent);
* a Dask cluster (:class:`ClusterPool`, the optional extra ``p2pboost[dask]``): a party's
  compute spread over machines, TLS inside the party, a lost worker's tasks redone
  (:mod:`p2pboost.workers._cluster`).

Work that keeps state between tasks addresses *places* of a :class:`PinnedExecutor`; its
kernels say what they do to that state (:func:`stateful`), so that a cluster can rebuild a
place whose worker it lost (:mod:`p2pboost.workers._base`).

Every executor here can record the tasks it runs (party, worker, function, submission, start,
end, CPU time) while a task trace is on (:func:`record_trace`, or the ``P2PBOOST_TRACE``
environment variable; :mod:`p2pboost.workers._trace`): the benchmarks replay a run's trace to
predict how it would scale on more cores than the machine has.

:func:`owned_executor` is the one place that decides what a protocol run uses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from p2pboost.workers._base import Log, PinnedExecutor, log_effect, stateful
from p2pboost.workers._cluster import ClusterPool, is_dask_client
from p2pboost.workers._connect import cluster_security, connect_cluster, local_cluster
from p2pboost.workers._local import (
    POOL_ENV,
    WORKER_NICENESS,
    PinnedPool,
    default_workers,
    idle_threads,
    idle_threads_supported,
    pinned_pool,
    pool_kind,
    process_pool,
    spare_cpus,
)
from p2pboost.workers._trace import (
    PARTY_ENV,
    TRACE_ENV,
    TaskRecord,
    read_trace,
    record_trace,
    trace_party,
    traced,
)

if TYPE_CHECKING:
    from distributed import Client

#: What the protocols accept as ``executor``: any executor, or a Dask client (its cluster).
AnyExecutor: TypeAlias = "Executor | Client"

__all__ = [
    "PARTY_ENV",
    "POOL_ENV",
    "TRACE_ENV",
    "WORKER_NICENESS",
    "AnyExecutor",
    "ClusterPool",
    "Log",
    "PinnedExecutor",
    "PinnedPool",
    "TaskRecord",
    "cluster_security",
    "connect_cluster",
    "default_workers",
    "idle_threads",
    "idle_threads_supported",
    "is_dask_client",
    "local_cluster",
    "log_effect",
    "owned_executor",
    "pinned_pool",
    "pool_kind",
    "process_pool",
    "read_trace",
    "record_trace",
    "spare_cpus",
    "stateful",
    "trace_party",
    "traced",
]


@contextlib.asynccontextmanager
async def owned_executor(
    executor: AnyExecutor | None,
    workers: int | None = None,
    *,
    pinned: bool = False,
    prefer_threads: bool = False,
) -> AsyncIterator[tuple[Executor, int]]:
    """``(executor, workers)`` for a protocol run.

    A caller's ``executor`` is used as it is and left running (``workers`` then says how many
    tasks to keep in flight; default: one per core, or one per worker of a cluster). Without
    an executor, a fresh pool of ``workers`` processes (default: one per core) is started and
    shut down on exit, in a thread, so the event loop keeps serving the node's other sessions
    meanwhile.

    A ``distributed.Client`` is used through a :class:`ClusterPool` made for the run (the
    client stays the caller's).

    ``pinned=True`` asks for a :class:`PinnedExecutor`: a caller's pinned pool or cluster is
    used as it is (``workers`` is then its number of places); any other executor cannot keep
    state in a chosen process, so a fresh pinned pool of ``workers`` processes is started
    beside it (and shut down on exit); the caller keeps its executor for the work that needs
    no pinning.

    ``prefer_threads``: the run's tasks release the GIL (the native kernel's), so a fresh pool
    may be threads of this process (:func:`pool_kind`).
    """
    if executor is not None and is_dask_client(executor):
        # The client stays the caller's; the pool asks the scheduler for its workers.
        cluster = await asyncio.to_thread(ClusterPool, cast(Any, executor))
        try:
            yield cluster, workers if workers and not pinned else cluster.workers
        finally:
            await asyncio.to_thread(cluster.shutdown, wait=True, cancel_futures=True)
        return
    if isinstance(executor, PinnedExecutor):
        yield executor, workers if workers and not pinned else executor.workers
        return
    n = workers or default_workers()
    if executor is not None and not pinned:
        yield cast(Executor, executor), n
        return
    pool: Executor = (
        pinned_pool(n, prefer_threads=prefer_threads)
        if pinned
        else process_pool(n, prefer_threads=prefer_threads)
    )
    try:
        yield pool, n
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
