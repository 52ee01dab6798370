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

Workers outlive no party: a party killed (SIGKILL, or SIGTERM's default action) cannot shut its
pools down, and their workers would wait for tasks forever. Every worker therefore watches its
parent and exits about half a second after its death (:func:`_start_parent_watch`, POSIX).

Some work keeps state in a worker between tasks: a vertical host keeps its shard of a tree's
ciphertexts and the partial histograms of the frontier in the process that built them, so per
layer only row numbers go in and candidate bytes come out. A process pool may run any task on
any of its processes, so that needs a :class:`PinnedPool`: one single-process pool per worker,
tasks addressed to a worker with :meth:`PinnedPool.submit_to` run in order in that process. It
is a plain :class:`~concurrent.futures.Executor` too (``submit`` picks the least busy worker),
so one pinned pool can serve every role of a party.

Every protocol takes an optional ``executor`` and otherwise starts its own pool:
:func:`~p2pboost.workers.owned_executor` is the one place that decides.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from p2pboost.workers._base import PinnedExecutor
from p2pboost.workers._trace import traced

__all__ = [
    "POOL_ENV",
    "WORKER_NICENESS",
    "PinnedPool",
    "default_workers",
    "idle_threads",
    "idle_threads_supported",
    "pinned_pool",
    "pool_kind",
    "process_pool",
    "spare_cpus",
]

P = ParamSpec("P")
T = TypeVar("T")

#: The environment variable that picks what local pools are made of (:func:`pool_kind`).
POOL_ENV = "P2PBOOST_POOL"

#: How much workers lower their priority (0 = normal, 19 = lowest on Linux).
WORKER_NICENESS = 10

#: How often (seconds) a worker checks that its parent is still alive.
_PARENT_POLL_SECONDS = 0.5

#: Exit status of a worker that ended because its parent was gone.
_ORPHAN_EXIT_CODE = 70


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def spare_cpus() -> int | None:
    """Processors (of those this process may use) with nothing to run right now, or None where
    the system does not say.

    Linux counts the runnable tasks of the whole machine in ``/proc/loadavg`` (fourth field,
    the caller itself included): a snapshot, so callers that act on it poll. Background work
    of lower value (making encryption randomisers ahead of time) uses it to take only what
    nobody else wants, even from processes of the same priority.
    """
    try:
        with open("/proc/loadavg", "rb") as fh:
            runnable = int(fh.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0, default_workers() - (runnable - 1))


def _watch_parent(parent: int, interval: float) -> None:
    """End this process once its parent ``parent`` is gone (checked every ``interval`` s).

    POSIX hands an orphan to another process (init, or the nearest subreaper), so ``getppid``
    stops being ``parent`` the moment the parent dies, however it died. That other process was
    alive beside the parent, so it never has the parent's pid.
    """
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(_ORPHAN_EXIT_CODE)  # nobody is left to report to, nothing to flush


def _start_parent_watch(interval: float = _PARENT_POLL_SECONDS) -> None:
    """End this worker within ``interval`` seconds of its parent's death (once it gets the CPU).

    Why: a party killed by SIGKILL cannot tell its children anything, and one ended by SIGTERM
    (Python's default action) dies without running ``atexit`` or the pool's shutdown either. A
    ``ProcessPoolExecutor`` worker waits for its next task in a blocking read of the call
    queue, which never sees end-of-file: each worker holds the queue's write end as well. So the
    workers were re-parented to init and lived on (about 58 MB each) for good. Once they are
    gone, multiprocessing's resource tracker exits by itself: it reads a pipe whose only
    writers are the party and the processes it spawned, sees end-of-file and unlinks what
    they leaked.

    The parent is the pid that multiprocessing recorded when it created this process, not
    ``getppid()`` now: a parent that died before this runs is then noticed at once. Polling
    ``getppid`` rather than Linux's ``PR_SET_PDEATHSIG``: the death signal follows the *thread*
    that started the child, and pools start workers from whichever thread submits, so a
    short-lived thread (``asyncio.to_thread``) ending would kill healthy workers. A check every
    half second costs nothing measurable.

    Windows does not re-parent (``getppid`` keeps naming the dead parent), so there is nothing
    to poll and no watch is started.
    """
    if os.name != "posix":
        return
    spawner = multiprocessing.parent_process()
    parent = spawner.pid if spawner is not None and spawner.pid is not None else os.getppid()
    threading.Thread(
        target=_watch_parent, args=(parent, interval), name="p2pboost-parent-watch", daemon=True
    ).start()


def _start_worker(initializer: Callable[..., object] | None, initargs: tuple[Any, ...]) -> None:
    """Start-up of every pool worker: watch the parent, lower priority, then ``initializer``.

    The watch comes first so that a worker whose parent dies during a long ``initializer``
    still goes (see :func:`_start_parent_watch`).
    """
    _start_parent_watch()
    with contextlib.suppress(OSError, AttributeError):  # not permitted, or no os.nice
        os.nice(WORKER_NICENESS)
    if initializer is not None:
        initializer(*initargs)


class _Pool(ProcessPoolExecutor):
    """A process pool whose tasks are recorded while a task trace is on
    (:mod:`p2pboost.workers._trace`; ``map`` goes through ``submit``)."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(traced(fn), *args, **kwargs)


def pool_kind(prefer_threads: bool = False) -> str:
    """What a local pool is made of: ``"processes"`` or ``"threads"``, from the environment
    variable :data:`POOL_ENV`: ``processes`` or ``threads`` for every pool, or ``auto`` (the
    default) for threads where the caller says its tasks release the GIL
    (``prefer_threads``) and processes everywhere else.

    Why threads where they can: with the native kernel (:mod:`p2pboost.crypto.kernels`) the
    ciphertext loops release the GIL, so worker threads of the party's own process run them on
    every core with no pickling, no pipes and one copy of the key's tables. Measured side by
    side (``python -m benchmarks hetero``, the same machine, alternated runs): on two cores
    give_credit30k took 0.90x the processes' seconds per tree and synth150k's OU 0.91x; on
    16 cores OU took 0.91x. What remains in Python (numpy bookkeeping, candidate lists) holds
    the GIL, so work that is Python to the core (PSI's per-id loop, the gmpy2 kernel) stays on
    processes: callers pass ``prefer_threads`` only for the native kernel's work.
    """
    kind = os.environ.get(POOL_ENV, "auto").strip().lower() or "auto"
    if kind not in ("auto", "processes", "threads"):
        raise ValueError(f"{POOL_ENV}={kind!r}: choose auto, processes or threads")
    if kind == "auto":
        return "threads" if prefer_threads else "processes"
    return kind


def _start_thread(initializer: Callable[..., object] | None, initargs: tuple[Any, ...]) -> None:
    """Start-up of a worker thread: lower its own priority (Linux: per thread), then
    ``initializer``."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(WORKER_NICENESS)
    if initializer is not None:
        initializer(*initargs)


def _start_idle_thread(
    initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    """Start-up of a background thread: the idle scheduling class (Linux: per thread), then
    ``initializer``."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if initializer is not None:
        initializer(*initargs)


@functools.cache
def idle_threads_supported() -> bool:
    """Whether this system runs a thread in the idle scheduling class (Linux's
    ``SCHED_IDLE``), for :func:`idle_threads`: asked once, of a short-lived thread, since a
    sandbox may refuse the call where the platform has it (then callers keep to their
    polled pools rather than run background work at full priority)."""
    if not (hasattr(os, "SCHED_IDLE") and hasattr(os, "sched_setscheduler")):
        return False
    answer: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            answer.append(False)
        else:
            answer.append(True)

    thread = threading.Thread(target=probe, name="p2pboost-idle-probe", daemon=True)
    thread.start()
    thread.join()
    return answer == [True]


def idle_threads(
    workers: int,
    *,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
) -> Executor:
    """Threads of this process that run only when a processor would otherwise idle, for work
    of lower value done ahead of time (a guest's encryption randomisers for its next tree).

    Why the idle class rather than a polled guess at spare processors: the kernel's scheduler
    gives these threads a core only while nothing else of any process wants it, and takes it
    back the moment something does, so they fill the short idle gaps of a latency-bound step
    (a tree's last layers) without slowing it, where a polled snapshot of the run queue starts
    work that then competes with the step. Only for tasks that release the GIL (the native
    kernel's loops): a starved thread holding the GIL would stall the others. Check
    :func:`idle_threads_supported` first (Linux only)."""
    return _ThreadPool(
        max_workers=workers,
        initializer=_start_idle_thread,
        initargs=(initializer, initargs),
        thread_name_prefix="p2pboost-idle",
    )


class _ThreadPool(ThreadPoolExecutor):
    """A thread pool whose tasks are recorded while a task trace is on."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(traced(fn), *args, **kwargs)


def process_pool(
    workers: int | None = None,
    *,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
    prefer_threads: bool = False,
) -> Executor:
    """A spawn-based pool whose workers run at lower priority, then call ``initializer``
    (threads of this process instead, where :func:`pool_kind` says so: ``prefer_threads``
    says the tasks release the GIL)."""
    if pool_kind(prefer_threads) == "threads":
        return _ThreadPool(
            max_workers=workers or default_workers(),
            initializer=_start_thread,
            initargs=(initializer, initargs),
            thread_name_prefix="p2pboost-worker",
        )
    return _Pool(
        max_workers=workers or default_workers(),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(initializer, initargs),
    )


class PinnedPool(PinnedExecutor):
    """``workers`` single-process pools: a task sent to worker ``i`` runs in its process.

    Tasks sent to one worker run one at a time in submission order, so module-level state a
    task leaves behind is there for the next task sent to the same worker (the vertical host's
    ciphertext shards, :mod:`p2pboost.hetero.training.shards`). :meth:`submit` (hence
    ``loop.run_in_executor`` and :meth:`map`) sends a task to the worker with the fewest tasks
    pending, so the pool also serves as an ordinary executor. Workers are started as by
    :func:`process_pool` (spawn, lower priority, then ``initializer``), each when it is first
    used; :meth:`start` starts them all and waits until they run.

    ``processes``: how many processes carry the ``workers`` places (default: one each). With
    fewer, place ``i`` lives in process ``i mod processes`` beside others and still runs its
    tasks one at a time in order; the state of several places shares a process, as on a
    cluster, so kernels name their state per place. Why: a party can cut its work for a wider
    machine than the one it runs on (as many shards as that machine has workers), which is
    how a two-core machine records the tasks a 64-worker party would run (the benchmarks'
    scaling prediction, ``--trace-workers``).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        processes: int | None = None,
        prefer_threads: bool = False,
    ) -> None:
        n = workers or default_workers()
        if n < 1:
            raise ValueError("a pinned pool needs at least one worker")
        k = min(n, processes or n)
        if k < 1:
            raise ValueError("a pinned pool needs at least one process")
        self._pools = [
            process_pool(
                1, initializer=initializer, initargs=initargs, prefer_threads=prefer_threads
            )
            for _ in range(k)
        ]
        self._places = n
        self._pending = [0] * k  # per process
        self._lock = threading.Lock()

    @property
    def workers(self) -> int:
        """How many places state can be pinned to (one worker process each, unless the pool
        was made with fewer ``processes``)."""
        return self._places

    def submit_to(
        self, worker: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` in worker ``worker``, after its earlier tasks."""
        if not 0 <= worker < self._places:
            raise IndexError(f"no place {worker} in a pinned pool of {self._places}")
        return self._run(worker % len(self._pools), traced(fn, worker), args, kwargs)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run ``fn`` in the process with the fewest pending tasks (a task trace records it as
        a task of no place: any worker could have run it)."""
        with self._lock:
            process = min(range(len(self._pending)), key=self._pending.__getitem__)
        return self._run(process, traced(fn), args, kwargs)

    def _run(
        self, process: int, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[T]:
        future = self._pools[process].submit(fn, *args, **kwargs)
        with self._lock:
            self._pending[process] += 1

        def _done(_: Future[T]) -> None:
            with self._lock:
                self._pending[process] -= 1

        future.add_done_callback(_done)
        return future

    def start(self) -> None:
        """Start every worker process and wait until each has run a task."""
        for future in [self.submit_to(i, os.getpid) for i in range(len(self._pools))]:
            future.result()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for pool in self._pools:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def pinned_pool(
    workers: int | None = None,
    *,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
    processes: int | None = None,
    prefer_threads: bool = False,
) -> PinnedPool:
    """A :class:`PinnedPool` of ``workers`` places (default: one per core), each in a process
    of its own unless ``processes`` says fewer (each a thread, where :func:`pool_kind` says
    so for ``prefer_threads``)."""
    return PinnedPool(
        workers,
        initializer=initializer,
        initargs=initargs,
        processes=processes,
        prefer_threads=prefer_threads,
    )
