"""A party's compute on a Dask cluster: :class:`ClusterPool`, the executor over a
``distributed.Client``.

Why Dask distributed: it installs with pip, runs a whole cluster in one process tree for tests
(``LocalCluster``), talks TLS with client certificates between scheduler, workers and client,
and recomputes the tasks of a worker that dies. The protocols do not know which executor they
run on: they submit tasks (``submit``, ``run_in_executor``, ``map``) and address stateful tasks
to a place (``submit_to``), and a cluster answers both.

**Places are workers.** :class:`ClusterPool` takes the cluster's workers when it starts, one
place each. A task sent to a place is submitted once the place's previous task has ended (so a
place runs its tasks in order whatever the worker's threads), restricted *loosely* to the
place's worker: it runs there while that worker lives, elsewhere once it is gone.

**A lost worker.** Tasks that keep no state are rerun by Dask on another worker. A stateful
kernel (:func:`~p2pboost.workers.stateful`) that lands on a worker without its state raises
:class:`~p2pboost.exceptions.WorkerStateLost`; the place then moves to the worker that ran it,
replays there the log of calls that made the state (kept here, in the party's process, in the
order the calls ran, whatever order their results arrive in: for a vertical host, the run's
settings and the current tree's calls, the tree's ciphertexts included) and runs the task
again, with every later task of the place, in order. Kernels are deterministic, so the state
and the results are those the lost worker would have had: training goes on to the identical
model.

**The private key stays home.** Tasks that carry a private key (decryption) run on
:meth:`ClusterPool.keyholder`: a process pool on the party's own machine, or only the workers
named in ``key_workers`` (machines the party trusts with the key), or, with
``key_workers="all"``, every worker: a cluster on machines the party trusts as much as its own
(then encryption also uses the key's faster CRT form, as a local pool does). Everything else
crosses the
party's internal network: public keys, encrypted gradients, binned features of a host's
shards, histograms and packed split-infos (ciphertexts), PSI's hashed ids and the session's
blinding scalar.

**Bytes, not objects.** Every task of the library takes and returns numpy arrays and
fixed-width ciphertext bytes (the fused kernels of :mod:`p2pboost.crypto.engine` and
:mod:`p2pboost.hetero.training.shards`), so what Dask moves is compact.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast

from p2pboost.exceptions import ClusterError, ConfigError, WorkerStateLost
from p2pboost.workers._base import Log, PinnedExecutor, log_effect
from p2pboost.workers._local import default_workers, process_pool
from p2pboost.workers._trace import traced

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["MAX_REPLAYS", "ClusterPool", "is_dask_client"]

P = ParamSpec("P")
T = TypeVar("T")

#: Times one task may find its state lost (and the state be rebuilt) before the run fails: a
#: cluster losing workers faster than a state can be rebuilt is not going to finish.
MAX_REPLAYS = 3


def is_dask_client(executor: object) -> bool:
    """Whether ``executor`` is a ``distributed.Client`` (checked without importing Dask)."""
    cls = type(executor)
    return cls.__name__ == "Client" and cls.__module__.startswith("distributed")


def _call(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    return fn(*args, **kwargs)


def _pinned(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """Run a place's task in a worker; a lost state is reported with the worker's address."""
    try:
        return fn(*args, **kwargs)
    except WorkerStateLost as exc:
        from distributed import get_worker

        raise WorkerStateLost(exc.message, get_worker().address) from None


@dataclass(eq=False)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: The caller's future; None for a replayed call (its result is not wanted).
    future: Future[Any] | None
    replays: int = 0
    #: The Dask future of the current attempt (None while none is submitted).
    remote: Any = None
    #: Ran and succeeded; stays in its place's queue until every earlier task has settled,
    #: so that the state logs take the calls in the order they ran (results may arrive in
    #: another order: each is fetched from its worker on its own).
    done: bool = False
    #: Its caller's future was given its outcome (a task run again after a move keeps it).
    settled: bool = False


@dataclass(eq=False)
class _Place:
    home: str
    #: Tasks submitted and not settled, in order (a replay's calls included).
    jobs: deque[_Job] = field(default_factory=deque)
    #: state name -> the calls that rebuild it (the first made it)
    logs: dict[Any, list[_Job]] = field(default_factory=dict)
    #: Being moved to another worker: new tasks wait in ``jobs`` until the move is done.
    moving: bool = False


class ClusterPool(PinnedExecutor):
    """An executor over a ``distributed.Client`` (module docstring): one place per worker the
    cluster has when it is made. ``owns_client``: :meth:`shutdown` closes the client.

    Tasks start in the order they are submitted (each gets a lower Dask priority than the one
    before). A place's tasks are all sent at once, restricted to its worker, which runs them in
    that order: its workers must each run one task at a time (``dask worker --nthreads 1``;
    the work holds the GIL, so more threads would not help anyway). When the scheduler
    reports a place's worker gone, the place moves to the live worker with the fewest places,
    its states are replayed there and its unsettled tasks sent again.

    ``key_workers``: addresses or names of the workers trusted with a private key, or
    ``"all"``; without them, tasks that carry one run in a process pool of this machine
    (:meth:`keyholder`).
    ``move_timeout``: how long a place whose worker is gone waits for a live worker.
    """

    def __init__(
        self,
        client: Client,
        *,
        key_workers: Sequence[str] | Literal["all"] | None = None,
        owns_client: bool = False,
        move_timeout: float = 60.0,
    ) -> None:
        self._client: Any = cast(Any, client)  # Dask's client is not typed throughout
        self._address = str(getattr(self._client.scheduler, "address", "?"))
        if self._client.asynchronous:
            raise ConfigError(
                "pass a synchronous distributed.Client (made outside the event loop, or with "
                "asynchronous=False): the pool runs its own calls in Dask's thread"
            )
        threads = self._client.nthreads()
        if not threads:
            raise ClusterError(f"the compute cluster at {self._address} has no workers")
        busy = sorted(w for w, n in threads.items() if n != 1)
        if busy:
            raise ConfigError(
                f"the workers of the compute cluster at {self._address} must each run one "
                f"task at a time (dask worker --nthreads 1); these run more: {', '.join(busy)}"
            )
        self._places = [_Place(address) for address in sorted(threads)]
        self._live = set(threads)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._order = itertools.count()
        self._trusted = key_workers == "all"
        self._key_workers = [] if key_workers in (None, "all") else list(key_workers)
        self._keyholder: Executor | None = None
        self._owns_client = owns_client
        self._move_timeout = move_timeout
        self._closed = False
        self._inflight: set[Any] = set()
        #: Times a place moved to another worker and had its states replayed there.
        self.moves = 0
        self._mover = ThreadPoolExecutor(1, thread_name_prefix="p2pboost-cluster-moves")
        _subscribe(self._client, self)

    @property
    def client(self) -> Client:
        return self._client  # type: ignore[no-any-return]

    @property
    def workers(self) -> int:
        return len(self._places)

    @property
    def homes(self) -> list[str]:
        """The worker address of each place now (a place moves when its worker is lost)."""
        with self._lock:
            return [place.home for place in self._places]

    # -- plain tasks -----------------------------------------------------------------------------
    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run ``fn`` on any worker (Dask reruns it elsewhere if its worker dies)."""
        return self._submit_on(None, fn, args, dict(kwargs))

    def _submit_on(
        self,
        workers: list[str] | None,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Future[T]:
        """A task without state, on ``workers`` only (None: any worker)."""
        future: Future[T] = Future()
        try:
            remote = self._send(_call, traced(fn), args, kwargs, workers)
        except ClusterError as exc:
            future.set_exception(exc)
            return future
        self._watch(remote, lambda ok, value: _settle(future, ok, value))
        return future

    # -- places ----------------------------------------------------------------------------------
    def submit_to(
        self, worker: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        future: Future[T] = Future()
        place = self._places[worker]
        job = _Job(fn, args, dict(kwargs), future)
        with self._lock:
            self._check_open()
            place.jobs.append(job)
            if place.moving:
                return future  # sent once the place has moved
        self._dispatch(place, job)
        return future

    def _dispatch(self, place: _Place, job: _Job) -> None:
        try:
            fn = traced(job.fn, self._places.index(place))
            remote = self._send(_pinned, fn, job.args, job.kwargs, [place.home])
        except ClusterError as exc:  # the client is gone: so is every task of the place
            with self._lock:
                waiting = [j.future for j in place.jobs if j.future is not None]
                place.jobs.clear()
            for future in waiting:
                _settle(future, False, exc)
            return
        with self._lock:
            job.remote = remote
        self._watch(remote, lambda ok, value: self._ended(place, job, remote, ok, value))

    def _ended(self, place: _Place, job: _Job, remote: Any, ok: bool, value: Any) -> None:
        """One attempt of a place's task ended (on the client's event loop)."""
        settle: tuple[Future[Any], bool, Any] | None = None
        with self._lock:
            if job.remote is not remote or self._closed or job not in place.jobs:
                return  # an attempt the place gave up (it moved, or failed the task)
            if not ok and isinstance(value, WorkerStateLost | _Cancelled):
                move = True
            else:
                move = False
                if ok:
                    job.done = True
                else:
                    place.jobs.remove(job)
                if job.future is not None and not job.settled:
                    job.settled = True
                    settle = (job.future, ok, value)
                elif not ok:  # a replayed call (or a settled task run again after a move)
                    # failed: so does the first task it served
                    served = next(
                        (j for j in place.jobs if j.future is not None and not j.settled), None
                    )
                    if served is not None and served.future is not None:
                        place.jobs.remove(served)
                        served.settled = True
                        settle = (served.future, False, value)
                # The place ran its tasks in order: log them in that order.
                while place.jobs and place.jobs[0].done:
                    head = place.jobs.popleft()
                    if head.future is not None:  # a replayed call is in its log already
                        _log(place, head)
        if move:
            self._mover.submit(self._move, place)
        if settle is not None:
            _settle(*settle)

    def _event(self, event: tuple[float, dict[str, Any]]) -> None:
        """Scheduler events (on the client's event loop): workers joining and leaving."""
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else {}
        if not isinstance(msg, dict) or "worker" not in msg:
            return
        action, worker = msg.get("action"), msg["worker"]
        with self._lock:
            if action == "add-worker":
                self._live.add(worker)
            elif action == "remove-worker":
                self._live.discard(worker)
            else:
                return
            self._changed.notify_all()
            lost = [p for p in self._places if p.home == worker and action == "remove-worker"]
            if self._closed:
                return
        for place in lost:
            self._mover.submit(self._move, place)

    def _move(self, place: _Place) -> None:
        """Move ``place`` to a live worker (its own again if it still lives: a lost state),
        replay its states there and send its unsettled tasks again (in the mover thread)."""
        with self._lock:
            if place.moving or self._closed:
                return
            place.moving = True
            stale = [j.remote for j in place.jobs if j.remote is not None]
            for j in place.jobs:
                # A task that ran but waits for an earlier one to settle runs again, in its
                # turn: the state it changed was on the lost worker. Its caller has its result.
                j.remote, j.done = None, False
        with contextlib.suppress(Exception):
            self._client.cancel(stale)
        with self._lock:
            home = self._new_home(place)
            real = [j for j in place.jobs if j.future is not None]
            failed: list[_Job] = []
            if home is None:
                failed, reason = real, f"no worker left in the compute cluster at {self._address}"
            elif real and real[0].replays >= MAX_REPLAYS:
                failed, reason = real, f"{self._lost()}: its workers keep failing"
            if failed or home is None:
                place.jobs.clear()
                place.moving = False
            else:
                if real:
                    real[0].replays += 1
                logs = place.logs.values()
                redo = [_Job(j.fn, j.args, j.kwargs, None) for log in logs for j in log]
                place.jobs = deque(redo + real)
                self.moves += place.home != home or bool(redo)
                place.home = home
        for job in failed:
            assert job.future is not None
            _settle(job.future, False, ClusterError(reason))
        if not failed and home is not None:
            self._resend(place)

    def _resend(self, place: _Place) -> None:
        """Send a moved place's tasks in order, then those submitted meanwhile, and only then
        let new tasks go straight out (so none overtakes an older one)."""
        while True:
            with self._lock:
                pending = [j for j in place.jobs if j.remote is None]
                if not pending or self._closed:
                    place.moving = False
                    return
            try:
                for job in pending:
                    self._dispatch(place, job)
            except Exception as exc:
                with self._lock:
                    waiting = [j.future for j in place.jobs if j.future is not None]
                    place.jobs.clear()
                    place.moving = False
                for future in waiting:
                    _settle(future, False, ClusterError(f"{self._lost()}: {exc}"))
                return

    def _new_home(self, place: _Place) -> str | None:
        """A live worker for ``place`` (lock held): its own if it lives, else the one with the
        fewest places; waits up to ``move_timeout`` for one to join."""
        if place.home in self._live:
            return place.home
        self._changed.wait_for(lambda: bool(self._live) or self._closed, self._move_timeout)
        if not self._live:
            return None
        load: dict[str, int] = dict.fromkeys(self._live, 0)
        for other in self._places:
            if other.home in load:
                load[other.home] += 1
        return min(sorted(load), key=lambda w: load[w])

    # -- Dask ------------------------------------------------------------------------------------
    def _send(
        self,
        runner: Callable[..., Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        workers: list[str] | None,
    ) -> Any:
        """Submit ``runner(fn, args, kwargs)`` (only on ``workers`` if given), after every
        task submitted before it."""
        with self._lock:
            self._check_open()
            priority = -next(self._order)
        if self._client.status in ("closing", "closed"):  # its futures would never end
            raise _Cancelled(self._lost())
        restrictions: dict[str, Any] = (
            {} if workers is None else {"workers": workers, "allow_other_workers": False}
        )
        remote = self._client.submit(
            runner, fn, args, kwargs, pure=False, priority=priority, **restrictions
        )
        with self._lock:
            self._inflight.add(remote)
        return remote

    def _watch(self, remote: Any, done: Callable[[bool, Any], None]) -> None:
        """Call ``done(ok, result or exception)`` when ``remote`` ends, and release it.

        Runs on the client's event loop, as Dask's own ``ClientExecutor`` waits for its
        futures: results are gathered concurrently, with no hop to a callback thread and no
        blocking call per result.
        """

        async def wait() -> None:
            try:
                value = await remote._result(raiseit=False)
                if remote.status == "finished":
                    outcome: tuple[bool, Any] = (True, value)
                elif remote.status == "error":
                    outcome = (False, value[1])  # (type, exception, traceback)
                else:
                    outcome = (False, _Cancelled(self._lost()))
            except Exception as exc:
                outcome = (False, _Cancelled(f"{self._lost()}: {exc}"))
            with self._lock:
                self._inflight.discard(remote)
            remote.release()
            done(*outcome)

        self._client.loop.add_callback(wait)

    def _lost(self) -> str:
        return f"lost a worker or the scheduler of the compute cluster at {self._address}"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")

    # -- keys and lifecycle ----------------------------------------------------------------------
    def keyholder(self) -> Executor:
        if self._trusted:
            return self
        with self._lock:
            if self._keyholder is None:
                self._keyholder = (
                    _Restricted(self, self._key_workers)
                    if self._key_workers
                    else process_pool(default_workers())
                )
            return self._keyholder

    def start(self) -> None:
        """Wait until the cluster has its workers (they run tasks from then on)."""
        self._client.wait_for_workers(self.workers)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
            inflight, self._inflight = list(self._inflight), set()
            keyholder, self._keyholder = self._keyholder, None
            waiting = [j.future for p in self._places for j in p.jobs if j.future is not None]
        for future in waiting:
            future.cancel()
        _unsubscribe(self._client, self)
        if cancel_futures and inflight:
            with contextlib.suppress(Exception):
                self._client.cancel(inflight)
        self._mover.shutdown(wait=wait)
        if keyholder is not None and not isinstance(keyholder, _Restricted):
            keyholder.shutdown(wait=wait, cancel_futures=cancel_futures)
        if self._owns_client:
            self._client.close()


#: The pools listening to each client's scheduler events (a client has one handler per topic).
_LISTENERS: dict[int, list[ClusterPool]] = {}
_LISTENERS_LOCK = threading.Lock()


def _subscribe(client: Any, pool: ClusterPool) -> None:
    """Pass ``client``'s worker events on to ``pool`` (and to the client's other pools)."""
    with _LISTENERS_LOCK:
        pools = _LISTENERS.setdefault(id(client), [])
        first = not pools
        pools.append(pool)
    if first:

        def dispatch(event: Any) -> None:
            with _LISTENERS_LOCK:
                listeners = list(_LISTENERS.get(id(client), ()))
            for listener in listeners:
                listener._event(event)

        client.subscribe_topic("all", dispatch)


def _unsubscribe(client: Any, pool: ClusterPool) -> None:
    with _LISTENERS_LOCK:
        pools = _LISTENERS.get(id(client), [])
        if pool in pools:
            pools.remove(pool)
        last = not pools
        if last:
            _LISTENERS.pop(id(client), None)
    if last:
        with contextlib.suppress(Exception):
            client.unsubscribe_topic("all")


class _Cancelled(ClusterError):
    """A Dask future cancelled under a task: its worker or the scheduler went away (what a
    plain task's caller then sees; a place's task is sent again first)."""


def _log(place: _Place, job: _Job) -> None:
    """Record a settled call of a stateful kernel in its state's log (lock held)."""
    effect = log_effect(job.fn)
    if effect is None or not job.args:
        return
    name = job.args[0]
    if effect is Log.START:
        place.logs[name] = [job]
    elif effect is Log.CLEAR:
        place.logs.pop(name, None)
    elif name in place.logs:
        if effect is Log.REWIND:
            del place.logs[name][1:]
        else:
            place.logs[name].append(job)


def _settle(future: Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _Restricted(Executor):
    """Tasks on the cluster's key workers only (``key_workers``), never anywhere else."""

    def __init__(self, pool: ClusterPool, workers: list[str]) -> None:
        self._pool = pool
        self._workers = workers

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self._pool._submit_on(self._workers, fn, args, dict(kwargs))
