"""Parties as processes on this machine: spawn, hear from, supervise and reap them.

The one harness for everything that runs a federation locally, each party in its own process
as separate organisations would: ``p2pboost demo`` and the benchmarks.

* A *role* is a module-level coroutine function ``async def role(report, **kwargs)``
  (module-level so that the ``spawn`` start method can pickle it by name). It may call
  ``report(kind, value)`` to tell the parent something on the way (an address it listens
  on, progress); what it returns is its result.
* Every party gets a fresh interpreter (``spawn``: nothing is inherited), leads its own
  process group (so its crypto worker processes go with it when it is killed), and dies with
  the parent: a parent killed outright must not leave a party, its workers and an open port
  waiting for peers that never come.
* The parent waits for one message (:meth:`LocalParties.expect`) or for every result
  (:meth:`LocalParties.wait`) under a deadline. If a party fails, dies or the deadline
  passes, every party is killed and the failure is raised as one error naming the causes
  first and the consequences (a peer whose session was aborted) after. Nothing ever hangs.

::

    with LocalParties("demo", timeout=300) as parties:
        parties.start("host", host_role, X=X_host)
        address = parties.expect("host", "listening")
        parties.start("guest", guest_role, address=address, X=X_guest, y=y)
        results = parties.wait()
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import math
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, Protocol

from p2pboost.exceptions import DeadlineExceeded, P2PBoostError, PeerDisconnected, SessionClosed

__all__ = ["FAILURE_GRACE", "LocalParties", "Report", "Role"]

#: After one party failed, how long the others have to report their own errors (seconds).
FAILURE_GRACE = 3.0
#: After a party reported its result, how long it may take to exit.
EXIT_GRACE = 15.0
#: How often a party checks that the process that started it is still alive.
PARENT_CHECK = 1.0


class Report(Protocol):
    """What a role calls to tell the parent something: ``report("listening", address)``."""

    def __call__(self, kind: str, value: object) -> None: ...


Role = Callable[..., Coroutine[Any, Any, Any]]
#: ``on_message(party, kind, value)``: messages that are neither a result nor a failure.
OnMessage = Callable[[str, str, Any], None]


# -- the child side ------------------------------------------------------------------------------


def _entry(conn: Connection, role: Role, kwargs: dict[str, Any], profile: str | None) -> None:
    """A party process: run ``role``, then send ``("done", result)`` or ``("error", ...)``."""
    with contextlib.suppress(OSError, AttributeError):  # POSIX only: lead a process group
        os.setpgid(0, 0)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()

    def report(kind: str, value: object) -> None:
        with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
            conn.send((kind, value))

    profiler = cProfile.Profile() if profile is not None else None
    try:
        if profiler is not None:
            profiler.enable()
        result = asyncio.run(role(report, **kwargs))
        if profiler is not None and profile is not None:
            profiler.disable()
            profiler.dump_stats(profile)
    except Exception as exc:
        # A session aborted by a peer, or a peer gone, is a consequence of another failure.
        cause = not isinstance(exc, SessionClosed | PeerDisconnected)
        report("error", (f"{type(exc).__name__}: {exc}", cause, traceback.format_exc()))
        conn.close()
        raise SystemExit(1) from None
    report("done", result)
    conn.close()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK)
    with contextlib.suppress(OSError, AttributeError):
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)  # this party and its workers
    os._exit(1)


# -- the parent side -----------------------------------------------------------------------------


class LocalParties:
    """Party processes by name (see the module docstring). Use as a context manager.

    ``label`` names the run in errors ("demo party 'host' failed: ..."); ``timeout`` (seconds,
    from now) bounds the whole run; ``tracebacks`` adds each failed party's traceback to the
    error (for benchmarks and debugging).
    """

    def __init__(self, label: str, *, timeout: float, tracebacks: bool = False) -> None:
        self.what = f"{label} party"
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.tracebacks = tracebacks
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[str, BaseProcess] = {}
        self._conns: dict[str, Connection] = {}
        self._inbox: dict[str, list[tuple[str, Any]]] = {}
        self.results: dict[str, Any] = {}
        #: party -> (what it reported, whether it is a cause rather than a consequence)
        self.errors: dict[str, tuple[str, bool]] = {}

    def start(self, name: str, role: Role, /, *, profile: str | None = None, **kwargs: Any) -> None:
        """Spawn party ``name`` running ``role(report, **kwargs)``; ``profile``: write the
        :mod:`cProfile` statistics of its event-loop thread to that path."""
        if name in self._procs:
            raise ValueError(f"party {name!r} already started")
        reader, writer = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=_entry, args=(writer, role, kwargs, profile), name=f"p2pboost-{name}"
        )
        proc.start()
        writer.close()  # the child holds the only writer: EOF once it is gone
        self._procs[name], self._conns[name], self._inbox[name] = proc, reader, []

    def expect(self, name: str, kind: str, on_message: OnMessage | None = None) -> Any:
        """The value of the next ``kind`` message of ``name`` (others go to ``on_message``)."""
        while True:
            found, value = self._dispatch(on_message, name, kind)
            if found:
                return value
            if name in self.results:
                raise P2PBoostError(f"{self.what} {name!r} ended before it sent {kind!r}")
            self._pump([name], f"{name}'s {kind!r}")

    def wait(self, on_message: OnMessage | None = None) -> dict[str, Any]:
        """Every party's result, once all reported and exited cleanly; raises otherwise."""
        while len(self.results) < len(self._procs):
            waiting = [p for p in self._procs if p not in self.results and p not in self.errors]
            self._pump(waiting, ", ".join(waiting))
            self._dispatch(on_message)
        self._dispatch(on_message)
        for party, proc in self._procs.items():
            proc.join(max(0.0, min(EXIT_GRACE, self.deadline - time.monotonic())))
            if proc.exitcode != 0:
                raise P2PBoostError(
                    f"{self.what} {party!r} reported its result but did not exit cleanly "
                    f"(exit code {proc.exitcode})"
                )
        return dict(self.results)

    def _dispatch(
        self, on_message: OnMessage | None, name: str | None = None, kind: str | None = None
    ) -> tuple[bool, Any]:
        """Hand the queued messages to ``on_message`` in order, up to the first ``kind``
        message of ``name`` (returned and removed); without ``on_message`` they stay queued."""
        for party, inbox in self._inbox.items():
            while inbox:
                k, value = inbox[0]
                if party == name and k == kind:
                    inbox.pop(0)
                    return True, value
                if on_message is None:
                    break
                inbox.pop(0)
                on_message(party, k, value)
        return False, None

    def _pump(self, names: list[str], waiting: str) -> None:
        """Wait for what ``names`` send next; raise on failure, death or the deadline."""
        deadline, grace_end = self.deadline, math.inf
        while True:
            now = time.monotonic()
            live = [p for p in names if p not in self.errors]
            if self.errors:
                grace_end = min(grace_end, now + FAILURE_GRACE)
                others = [p for p in self._procs if p not in self.results and p not in self.errors]
                if not others or now >= grace_end:
                    raise self.failure()
            if now >= deadline:
                if self.errors:
                    raise self.failure()
                raise DeadlineExceeded(
                    f"the run did not finish within {self.timeout:g} s (waiting for "
                    f"{waiting}); every party was stopped (a bigger run needs a larger timeout)"
                )
            watched = live or [p for p in self._procs if p not in self.results]
            handles = [self._conns[p] for p in watched] + [self._procs[p].sentinel for p in watched]
            ready = wait(handles, timeout=max(0.0, min(deadline, grace_end) - now))
            got = False
            for party in watched:
                proc = self._procs[party]
                if self._conns[party] in ready or proc.sentinel in ready:
                    got |= self._drain(party)
                if (
                    proc.sentinel in ready
                    and party not in self.results
                    and party not in self.errors
                ):
                    self.errors[party] = (f"exited (code {proc.exitcode}) without a result", True)
            if got and not self.errors:
                return

    def _drain(self, party: str) -> bool:
        """Take every message ``party`` has sent; whether any arrived."""
        conn, got = self._conns[party], False
        with contextlib.suppress(EOFError, OSError):
            while conn.poll():
                got = True
                message = conn.recv()
                if not (isinstance(message, tuple) and len(message) == 2):
                    raise P2PBoostError(f"{self.what} {party!r} sent an unexpected message")
                kind, value = message
                if kind == "done":
                    self.results[party] = value
                elif kind == "error":
                    text, cause, trace = value
                    self.errors[party] = (f"{text}\n{trace}" if self.tracebacks else text, cause)
                else:
                    self._inbox[party].append((kind, value))
        return got

    def failure(self) -> P2PBoostError:
        """One error naming every failed party, causes first."""
        ordered = sorted(self.errors.items(), key=lambda item: not item[1][1])
        return P2PBoostError(
            "; ".join(f"{self.what} {party!r} failed: {text}" for party, (text, _) in ordered)
        )

    def kill_all(self) -> None:
        """Kill every party still running, with its worker processes."""
        for proc in self._procs.values():
            _kill(proc)
        for conn in self._conns.values():
            conn.close()

    def __enter__(self) -> LocalParties:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill_all()


def _kill(proc: BaseProcess) -> None:
    """Kill a party and its worker processes (its own process group) if still running."""
    if proc.pid is None:
        return
    if proc.exitcode is None:
        # Each party leads its own process group (see _entry), so its worker processes go
        # with it; a party too young to have one is killed alone.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            proc.kill()
    proc.join(5.0)
    if proc.exitcode is not None:
        proc.close()
