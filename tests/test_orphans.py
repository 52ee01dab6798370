"""A killed party leaves no process behind (issue 16).

A real party process starts a :func:`~p2pboost.workers.process_pool` and a
:func:`~p2pboost.workers.pinned_pool`, runs a task on every worker and waits; the test reads its
process tree from ``/proc``, kills it (SIGKILL, which nothing can catch, and SIGTERM, whose
default action skips ``atexit`` and every shutdown) and checks that each of its descendants
(the pool workers and multiprocessing's resource tracker) is gone within seconds. Before the
parent watch in the workers, they were re-parented to init and lived on for good.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from p2pboost.testing import time_factor
from p2pboost.workers import process_pool
from p2pboost.workers._local import _PARENT_POLL_SECONDS

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="reads the process tree from Linux's /proc"
)

#: Bound of the issue: no process of a killed party may remain after this many seconds.
GONE_WITHIN = 10.0

PARTY = """
import time
from p2pboost.workers import pinned_pool, process_pool

pool = process_pool(2)
assert sorted(pool.map(abs, [-1, 2, -3, 4])) == [1, 2, 3, 4]
pinned = pinned_pool(2)
pinned.start()
print("ready", flush=True)
time.sleep(600)
"""

#: pid -> (ppid, state, start time in clock ticks since boot)
Table = dict[int, tuple[int, str, int]]


def _processes() -> Table:
    """Every process of the machine, from ``/proc/<pid>/stat``."""
    table: Table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # ended meanwhile
            continue
        # The command name (field 2) is in parentheses and may hold spaces or parentheses.
        fields = stat[stat.rindex(b")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), fields[0].decode(), int(fields[19]))
    return table


def _descendants(root: int) -> dict[int, int]:
    """The processes below ``root`` in the process tree: pid -> start time."""
    table = _processes()
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                frontier.append(pid)
    return found


def _alive(recorded: dict[int, int]) -> list[int]:
    """Those of ``recorded`` still running: same pid and start time (not a new process given a
    recycled pid), not a zombie (dead, holding no memory, waiting for init to reap it)."""
    table = _processes()
    return [
        pid
        for pid, start in recorded.items()
        if pid in table and table[pid][2] == start and table[pid][1] not in ("Z", "X")
    ]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _wait_ready(party: subprocess.Popen[str], errors: Path, timeout: float) -> None:
    """Until the party says its workers all run (fails with its stderr if it does not)."""
    assert party.stdout is not None
    readable, _, _ = select.select([party.stdout], [], [], timeout)
    line = party.stdout.readline() if readable else ""
    assert line.strip() == "ready", (
        f"party not ready in {timeout:.0f} s: {line!r}\n{errors.read_text()}"
    )


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_no_process_of_a_killed_party_remains(sig: signal.Signals, tmp_path: Path) -> None:
    errors = tmp_path / "party.err"
    recorded: dict[int, int] = {}
    with (
        errors.open("w") as err,
        subprocess.Popen(
            [sys.executable, "-c", PARTY], stdout=subprocess.PIPE, stderr=err, text=True
        ) as party,
    ):
        try:
            _wait_ready(party, errors, 60 * time_factor())
            recorded = _descendants(party.pid)
            commands = [_cmdline(pid) for pid in recorded]
            assert sum("resource_tracker" in c for c in commands) == 1, commands
            assert sum("spawn_main" in c for c in commands) == 4, commands  # 2 + 2 workers

            party.send_signal(sig)
            assert party.wait(10 * time_factor()) == -sig  # no handler ran: the signal killed it
            deadline = time.monotonic() + GONE_WITHIN * time_factor()
            while (left := _alive(recorded)) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not left, "still running after the party's death:\n" + "\n".join(
                f"{pid}: {_cmdline(pid)}" for pid in left
            )
        finally:
            if party.poll() is None:
                party.kill()
            for pid in _alive(recorded):  # a failed run leaves nothing behind either
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_workers_outlive_the_thread_that_started_them() -> None:
    """The watch follows the parent process, not the thread that started a worker (as Linux's
    parent-death signal would): a pool first used from a thread that has ended keeps its
    worker."""
    with process_pool(1) as pool:
        started: list[int] = []
        starter = threading.Thread(target=lambda: started.append(pool.submit(os.getpid).result()))
        starter.start()
        starter.join()
        time.sleep(3 * _PARENT_POLL_SECONDS)  # several checks of the watch
        assert pool.submit(os.getpid).result(timeout=10 * time_factor()) == started[0]
