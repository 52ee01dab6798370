"""Benchmark parties as separate processes: spawn them, hear from them, reap them.

A *role* is a module-level coroutine function ``async def role(conn, **kwargs) -> result``
(module-level so that the ``spawn`` start method can pickle it by name). It may send
intermediate messages on ``conn`` (``conn.send(("address", node.address))``); its result
arrives as ``("ok", result)``, a failure as ``("error", traceback)``. Every party gets a fresh
interpreter (``spawn``), as a real deployment's processes would, so nothing is inherited.

::

    with Parties() as parties:
        parties.start("host1", host_role, X=...)
        address = parties.receive("host1", "address")
        parties.start("guest", guest_role, addresses={"host1": address})
        guest_result = parties.receive("guest", "ok")

``profile``: the role runs under :mod:`cProfile` (its event-loop thread only) and the
statistics are written to that path (read them with :mod:`pstats`).
"""

from __future__ import annotations

import asyncio
import cProfile
import multiprocessing
import traceback
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any

from benchmarks.hetero import _receive

__all__ = ["Parties", "Role"]

Role = Callable[..., Coroutine[Any, Any, Any]]
#: Seconds a party may take to exit once it reported, before it is killed.
JOIN_TIMEOUT = 30.0


def _entry(conn: Connection, role: Role, kwargs: dict[str, Any], profile: str | None) -> None:
    """Process entry point: run the role, send ``("ok", result)`` or ``("error", text)``."""
    try:
        if profile is None:
            result = asyncio.run(role(conn, **kwargs))
        else:
            profiler = cProfile.Profile()
            profiler.enable()
            result = asyncio.run(role(conn, **kwargs))
            profiler.disable()
            profiler.dump_stats(profile)
        conn.send(("ok", result))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise
    finally:
        conn.close()


class Parties:
    """Spawned party processes by name; on exit every one is joined (or killed)."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[str, BaseProcess] = {}
        self._pipes: dict[str, Connection] = {}

    def start(self, name: str, role: Role, /, *, profile: str | None = None, **kwargs: Any) -> None:
        """Spawn party ``name`` running ``role(conn, **kwargs)`` (``kwargs`` may hold a
        ``name`` of their own: the first two parameters are positional only)."""
        if name in self._procs:
            raise ValueError(f"party {name!r} already started")
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_entry, args=(send, role, kwargs, profile), name=name)
        proc.start()
        send.close()
        self._procs[name] = proc
        self._pipes[name] = recv

    def receive(self, name: str, kind: str) -> Any:
        """The next message of ``name``, which must be tagged ``kind`` (SystemExit if not)."""
        return _receive(self._pipes[name], self._procs[name], name, kind)

    def close(self) -> None:
        for proc in self._procs.values():
            proc.join(timeout=JOIN_TIMEOUT)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for pipe in self._pipes.values():
            pipe.close()
        self._procs.clear()
        self._pipes.clear()

    def __enter__(self) -> Parties:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:  # a party failed: do not wait for the others to time out
            for proc in self._procs.values():
                if proc.is_alive():
                    proc.kill()
        self.close()
