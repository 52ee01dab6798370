"""The task trace: every pool task a party runs, with where and when it ran.

Why: a party's work should scale with its cores, and the machines this project is built on have
two. What a wider machine would do with a run can still be worked out from the run itself, if
every task is known: which party sent it, when, when it started and ended in its worker, and
how much CPU it used there (``benchmarks/_schedule.py`` replays the tasks on W workers by list
scheduling). This module records exactly that, for every executor of this package (the process
pools, :class:`~p2pboost.workers.PinnedPool`, :class:`~p2pboost.workers.ClusterPool`), so the
code that submits tasks (the crypto engine, a host's shard kernels, PSI) is not touched.

**Off by default, and then free**: an executor's ``submit`` asks :func:`traced` for the callable
to send; with no trace being recorded that is one dictionary look-up and the callable itself.
Tracing is on in a process while a :func:`record_trace` block runs, or for its whole life when
the environment variable :data:`TRACE_ENV` names a directory (which also reaches processes it
starts, a party's included).

**How a record comes back: a file per worker process.** The wrapper sent with the task (a
:class:`_Traced`, which carries the directory, the party and the submission time) appends one
JSON line to ``DIR/tasks-PID.jsonl`` in the worker when the task ends. The other way, the record
returned beside the result, would change what every task returns: ``ProcessPoolExecutor.map``
and Dask would hand the pair to callers that expect the result, so every executor would need a
second future to unwrap it, and cancellation would have to cross both; and the records would
still have to travel from each party's process (guest and host run as separate processes) to
whoever reads them. A file per process needs none of that: whoever set the directory reads
every file in it after the run (:func:`read_trace`). A line is written (and flushed) as its task
ends, so a worker that is killed loses at most the line it was writing, which the reader skips.
A worker on another machine (a Dask cluster) writes under the same path there, if it exists;
tracing never fails a task.

**Which party**: the label in force where the task was submitted, from :func:`trace_party`
(a context variable, so parties that share a process and an event loop, as in the PSI
benchmark, are told apart: each coroutine labels itself), else :func:`record_trace`'s
``party``, else :data:`PARTY_ENV`, else ``pid-N``.

**Times**: ``submitted`` is read in the submitting process, ``start`` and ``end`` in the worker,
all from the wall clock (``time.time``), so that the tasks of separate processes on one machine
line up on one time axis. ``cpu`` is the CPU time of the worker thread during the task: on a
machine with fewer cores than busy workers a task's wall time includes its waits for a core,
its CPU time does not, and that is what the task would take on a core of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import process as _process
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "PARTY_ENV",
    "TRACE_ENV",
    "TaskRecord",
    "read_trace",
    "record_trace",
    "trace_party",
    "traced",
]

P = ParamSpec("P")
T = TypeVar("T")

#: A directory: every process that has it in its environment records its tasks there.
TRACE_ENV = "P2PBOOST_TRACE"
#: The party label of tasks submitted where no :func:`trace_party` is in force.
PARTY_ENV = "P2PBOOST_TRACE_PARTY"

#: The directory set by :func:`record_trace` in this process (None: see the environment).
_directory: str | None = None
#: The label of tasks submitted in this context.
_party: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "p2pboost_trace_party", default=None
)

#: Held while a record is written: a process may run tasks in several threads (a Dask
#: worker, a thread pool).
_files_lock = threading.Lock()


@dataclass(frozen=True)
class TaskRecord:
    """One task as it ran (times in seconds since the epoch, wall clock)."""

    #: Who submitted it: guest, host1, ...
    party: str
    #: The process (and thread) that ran it: ``"PID/TID"``.
    worker: str
    #: The name of the function the task ran (a ``functools.partial`` and ``map``'s batching
    #: are looked through: ``encrypt_task``, not ``partial``).
    kind: str
    #: The place of a :class:`~p2pboost.workers.PinnedExecutor` it was sent to, or None for a
    #: task any worker could run.
    place: int | None
    submitted: float
    start: float
    end: float
    #: CPU seconds of the worker thread during the task.
    cpu: float
    #: Size of what it returned, when that is bytes or arrays (what a party would send on).
    out_bytes: int
    #: Whether it returned (False: it raised).
    ok: bool

    @property
    def wall(self) -> float:
        return self.end - self.start


def _kind(fn: Callable[..., Any]) -> str:
    """The name of the function ``fn`` runs, through partials and ``map``'s batching."""
    while isinstance(fn, functools.partial):
        if fn.func is _process._process_chunk and fn.args:
            fn = fn.args[0]  # ProcessPoolExecutor.map: partial(_process_chunk, fn)
        else:
            fn = fn.func
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _size(value: object, depth: int = 2) -> int:
    """Bytes in ``value`` if it is bytes, an array, or a tuple or list of those."""
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if depth > 0 and isinstance(value, tuple | list):
        return sum(_size(v, depth - 1) for v in value)
    return 0


def _write(directory: str, line: str) -> None:
    """Append ``line`` to this process's trace file in ``directory`` (never raises).

    Opened and closed per record: a task takes milliseconds, an append tens of microseconds,
    and no file is left open in a worker that is killed or outlives the trace."""
    path = Path(directory) / f"tasks-{os.getpid()}.jsonl"
    with contextlib.suppress(OSError), _files_lock, path.open("a", encoding="utf-8") as fh:
        fh.write(line)


class _Traced:
    """A task's callable and what its record needs from the submitting side; calling it runs
    the callable and appends the record (module docstring). Pickled with the task."""

    def __init__(
        self, fn: Callable[..., Any], directory: str, party: str, place: int | None
    ) -> None:
        self.fn = fn
        self.directory = directory
        self.party = party
        self.place = place
        self.kind = _kind(fn)
        self.submitted = time.time()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start, cpu0 = time.time(), time.thread_time()
        ok, out = False, 0
        try:
            result = self.fn(*args, **kwargs)
            ok, out = True, _size(result)
            return result
        finally:
            cpu, end = time.thread_time() - cpu0, time.time()
            worker = f"{os.getpid()}/{threading.get_native_id()}"
            record = [self.party, worker, self.kind, self.place, self.submitted, start, end]
            _write(self.directory, json.dumps([*record, cpu, out, ok]) + "\n")


def _settings() -> tuple[str, str] | None:
    """(directory, party) when tasks submitted here are to be traced."""
    directory = _directory or os.environ.get(TRACE_ENV)
    if not directory:
        return None
    party = _party.get() or os.environ.get(PARTY_ENV) or f"pid-{os.getpid()}"
    return directory, party


def traced(fn: Callable[P, T], place: int | None = None) -> Callable[P, T]:
    """What an executor should send for ``fn``: ``fn`` itself while no trace is recorded, else
    ``fn`` wrapped so that its worker records it (``place``: the place it is sent to).

    Idempotent: an executor that hands a wrapped task to another one (a pinned pool to its
    per-place pools) records it once."""
    if isinstance(fn, _Traced):
        return fn
    settings = _settings()
    if settings is None:
        return fn
    return _Traced(fn, *settings, place)


@contextlib.contextmanager
def record_trace(directory: str | os.PathLike[str], party: str | None = None) -> Iterator[Path]:
    """Trace every task submitted in this process while the block runs, into ``directory``
    (made if need be), labelled ``party`` unless a :func:`trace_party` says otherwise."""
    global _directory
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    previous = _directory
    _directory = str(path)
    token = _party.set(party) if party is not None else None
    try:
        yield path
    finally:
        _directory = previous
        if token is not None:
            _party.reset(token)


@contextlib.contextmanager
def trace_party(party: str) -> Iterator[None]:
    """Label the tasks submitted in this context (this coroutine and the tasks and threads it
    starts from here on) as ``party``'s."""
    token = _party.set(party)
    try:
        yield
    finally:
        _party.reset(token)


def read_trace(directory: str | os.PathLike[str]) -> list[TaskRecord]:
    """Every task recorded in ``directory``, in the order they were submitted.

    A line that is not a whole record (a worker killed while writing it) is skipped."""
    records: list[TaskRecord] = []
    for path in sorted(Path(directory).glob("tasks-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                party, worker, kind, place, sub, start, end, cpu, out, ok = json.loads(line)
                record = TaskRecord(
                    str(party),
                    str(worker),
                    str(kind),
                    None if place is None else int(place),
                    float(sub),
                    float(start),
                    float(end),
                    float(cpu),
                    int(out),
                    bool(ok),
                )
            except (ValueError, TypeError):
                continue
            records.append(record)
    records.sort(key=lambda r: r.submitted)
    return records
