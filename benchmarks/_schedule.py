"""How a run would scale on more cores: its task trace replayed by list scheduling.

These machines have two cores, the servers a bank runs p2pboost on have 16 to 64. A benchmark
records every pool task of its run (:mod:`p2pboost.workers._trace`: party, kind, place,
submission, start, end, CPU time, bytes returned), rebuilds the run's task graph from the
trace, and replays it here on ``W`` workers per party for any ``W``. The model, stated once
(benchmarks/README.md repeats it for readers of the JSON):

* **Each party on its own machine** with ``W`` workers; parties share nothing but the network.
* **A task takes its CPU time**, measured in its worker. On two cores shared by every worker of
  both parties a task's wall time includes its waits for a core; its CPU time is what it takes
  on a core of its own. Memory bandwidth and caches shared by W busy cores are not modelled.
* **Dependencies are what happened before**: a task depends on every task that had ended before
  it was submitted (any party's: a message from the other party follows a task of theirs),
  except tasks of its own party and kind. Why the exception: a protocol step submits its tasks
  as a stream that the code throttles to the worker count (two chunks per worker ahead, a
  window of PSI batches), so at two workers the fifth chunk is submitted when the first ends
  though it does not need it; at 64 workers all would be submitted at once. A step whose tasks
  really fed one another would be replayed as independent (none does here). Tasks the code runs
  only to fill idle workers (:data:`BACKGROUND`: randomisers made ahead of time) are replayed
  at the lowest priority and do not count in the run's length; they are the dependency of
  their own party's later encryptions only (:data:`CONSUMERS`, which took what they had made
  when submitted), so the work they saved an encryption is done somewhere in every replay: in
  idle gaps where the replay has them, before the next tree's encryptions where it has none
  (at one worker nearly all of it), and never counted as free.
* **The party's own time stays as measured**: between the event a task waited for (its latest
  dependency's end, or the end of the task of its own stream that released it) and its
  submission the party's process worked (decoding, slicing, choosing splits, sending); that lag
  is kept as it was, whatever ``W``, and the stretch from the start of the window to the first
  task and from the last task to the end of the window too. The parties' processes are not a
  resource: lags do not queue behind one another.
* **The network**: when a task's latest dependency belongs to another party, that task's output
  crossed the network (a gradient chunk, a package of split-infos); it is sent when it is made,
  one message at a time per direction, at ``bandwidth`` bytes per second (None: instant). The
  trace's own lags already hold the loopback's time, so this counts a message's time twice at
  most: slightly pessimistic.
* **Places are kept**: a task sent to place ``p`` of a pinned pool (a host's row shard) runs on
  worker ``p mod W`` after the place's earlier tasks, as the pool would run it; other tasks run
  on any idle worker.
* **List scheduling**: an idle worker takes the ready task submitted first (Graham's rule);
  background tasks last.

**Where the predicted time goes** (:class:`CriticalPath`): from the replay's last task back to
the start, each step follows what held the task up last: the dependency that ended last (then
the network, if its output crossed it, and the party's own lag), or its place's previous task.
Along that chain the replay's length splits exactly into the tasks' own times, their waits for
a worker, the parties' own time and the network. Waits for a worker are the work bounding the
time (more workers shorten them); the parties' own time is what no number of workers shortens.

The tasks are replayed as the run cut them. Work the code cuts by its worker count (a host's
shards are one per worker, decryption is cut in ``workers`` pieces) is replayed in the run's
pieces, so a trace of a run at two workers cannot show more parallelism than those pieces
hold; run the benchmark with ``--workers W`` (its CPU-time durations do not mind two cores
being shared by many workers) to see the cuts of ``W``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from p2pboost.workers import TaskRecord

__all__ = [
    "BACKGROUND",
    "WIDTHS",
    "CriticalPath",
    "Task",
    "critical_path",
    "replay",
    "scaling",
    "tasks_from_trace",
]

#: Task kinds that only fill idle workers (the crypto engine's randomisers made ahead).
BACKGROUND = frozenset({"factors_task"})
#: Task kinds that take what their party's background tasks made (encryptions take the
#: randomisers from the stash when they are submitted).
CONSUMERS = frozenset({"encrypt_packed_task", "encrypt_task"})
#: Workers per party the benchmarks report.
WIDTHS = (8, 16, 32, 64)


@dataclass(frozen=True)
class Task:
    """One task of a trace, as the replay sees it (times in seconds on one clock)."""

    party: str
    kind: str
    submitted: float
    #: When it ended in the run (its place in the run's order of events).
    end: float
    #: How long it takes on a worker of its own.
    duration: float
    place: int | None = None
    #: Bytes it returned: what crosses the network when another party waits for it.
    out_bytes: int = 0
    background: bool = False


@dataclass(frozen=True)
class CriticalPath:
    """A replay's length taken apart along its critical path (module docstring), in seconds;
    the four add up to the replay's length."""

    #: The tasks' own durations.
    tasks: float
    #: Ready tasks waiting for a worker of their party (or of their place).
    waits: float
    #: The parties' own time: lags before submissions, before the first task, after the last.
    own: float
    #: Messages between parties at the stated bandwidth.
    network: float

    @property
    def total(self) -> float:
        return self.tasks + self.waits + self.own + self.network

    def per(self, units: float) -> dict[str, float]:
        """The JSON object: each part divided by ``units`` (trees)."""
        return {
            "tasks": round(self.tasks / units, 4),
            "waits": round(self.waits / units, 4),
            "own": round(self.own / units, 4),
            "network": round(self.network / units, 4),
        }


def tasks_from_trace(
    records: Iterable[TaskRecord], background: Iterable[str] = BACKGROUND
) -> list[Task]:
    """The trace's records as tasks (duration: CPU time, module docstring)."""
    quiet = frozenset(background)
    return [
        Task(
            party=r.party,
            kind=r.kind,
            submitted=r.submitted,
            end=r.end,
            duration=max(0.0, r.cpu),
            place=r.place,
            out_bytes=r.out_bytes,
            background=r.kind in quiet,
        )
        for r in records
    ]


@dataclass
class _Graph:
    """The dependencies of a trace: per stream (party, kind) its tasks by end, and per task
    how long a prefix of each other stream it waits for."""

    tasks: list[Task]
    #: stream -> indices of its foreground tasks, by end in the run
    streams: dict[tuple[str, str], list[int]]
    #: task -> [(stream, prefix length)] of its dependencies (non-empty prefixes only)
    needs: list[list[tuple[tuple[str, str], int]]]
    #: task -> its latest dependency (index), or None
    trigger: list[int | None]
    #: task -> the party's own time before its submission
    lag: list[float]
    #: task -> the task before it at its place (same party and place), or None
    before: list[int | None]


def _graph(tasks: Sequence[Task], start: float) -> _Graph:
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].submitted, i))
    ordered = [tasks[i] for i in order]
    streams: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(ordered):
        streams.setdefault((t.party, t.kind), []).append(i)
    for members in streams.values():
        members.sort(key=lambda i: ordered[i].end)
    quiet = {s for s, members in streams.items() if ordered[members[0]].background}
    ends = {s: [ordered[i].end for i in members] for s, members in streams.items()}
    needs: list[list[tuple[tuple[str, str], int]]] = []
    trigger: list[int | None] = []
    lag: list[float] = []
    before: list[int | None] = []
    last_at_place: dict[tuple[str, int], int] = {}
    for i, t in enumerate(ordered):
        own = (t.party, t.kind)
        mine: list[tuple[tuple[str, str], int]] = []
        latest: int | None = None
        released = start  # the latest event it may have reacted to
        for stream, stream_ends in ends.items():
            if stream in quiet and not (t.kind in CONSUMERS and stream[0] == t.party):
                continue  # background work is only its own party's encryptions' dependency
            k = bisect.bisect_right(stream_ends, t.submitted)
            if k == 0:
                continue
            last = streams[stream][k - 1]
            released = max(released, ordered[last].end)
            if stream == own:
                continue  # its own stream released it, it did not wait for it
            mine.append((stream, k))
            if latest is None or ordered[last].end > ordered[latest].end:
                latest = last
        needs.append(mine)
        trigger.append(latest)
        lag.append(max(0.0, t.submitted - released))
        if t.place is None:
            before.append(None)
        else:
            key = (t.party, t.place)
            before.append(last_at_place.get(key))
            last_at_place[key] = i
    return _Graph(ordered, streams, needs, trigger, lag, before)


class _Replay:
    """One list-scheduling replay of a graph on ``workers`` workers per party."""

    def __init__(self, graph: _Graph, workers: int, start: float, bandwidth: float | None) -> None:
        self.g = graph
        self.w = workers
        self.bandwidth = bandwidth
        n = len(graph.tasks)
        self.finish: list[float | None] = [None] * n
        self.events: list[tuple[float, int, int, int]] = []  # (time, seq, what, task)
        self.seq = itertools.count()
        # Dependencies not yet met: one per stream prefix, one for the place's previous task.
        self.blocked = [len(needs) for needs in graph.needs]
        self.waiting: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for i, needs in enumerate(graph.needs):
            for stream, k in needs:
                self.waiting.setdefault(stream, []).append((k, i))
        for entries in self.waiting.values():
            entries.sort()
        self.cursor = dict.fromkeys(self.waiting, 0)
        self.done_prefix = dict.fromkeys(graph.streams, 0)
        self.prefix_max: dict[tuple[str, str], list[float]] = {s: [start] for s in graph.streams}
        #: stream -> per prefix length, the task that ended last in it (None: empty prefix)
        self.prefix_arg: dict[tuple[str, str], list[int | None]] = {
            s: [None] for s in graph.streams
        }
        #: task -> (what held it up last: a task or None for the start, own time, network)
        self.held: list[tuple[int | None, float, float]] = [(None, 0.0, 0.0)] * n
        self.ready_at: list[float] = [start] * n
        self.started: list[float] = [start] * n
        self.position: dict[int, tuple[str, str]] = {}
        for stream, members in graph.streams.items():
            for i in members:
                self.position[i] = stream
        self.after: dict[int, int] = {}
        for i, prev in enumerate(graph.before):
            if prev is not None:
                self.after[prev] = i
                self.blocked[i] += 1
        self.arrival: dict[int, float] = {}
        self.link_free: dict[tuple[str, str], float] = {}
        self.sends: dict[int, set[str]] = {}
        for i, trig in enumerate(graph.trigger):
            if trig is not None and graph.tasks[trig].party != graph.tasks[i].party:
                self.sends.setdefault(trig, set()).add(graph.tasks[i].party)
        self.parties = sorted({t.party for t in graph.tasks})
        self.idle = {p: set(range(workers)) for p in self.parties}
        self.running_on: dict[int, int] = {}
        self.unbound: dict[str, list[tuple[int, int, int]]] = {p: [] for p in self.parties}
        self.pinned: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.start = start

    def run(self) -> list[float | None]:
        for i, count in enumerate(self.blocked):
            if count == 0:
                self._eligible(i)
        while self.events:
            now = self.events[0][0]
            touched: set[str] = set()
            while self.events and self.events[0][0] == now:
                _, _, what, i = heapq.heappop(self.events)
                touched.add(self.g.tasks[i].party)
                if what == 0:
                    self._ready(i, now)
                else:
                    self._finished(i, now)
            for party in sorted(touched):
                self._dispatch(party, now)
        return self.finish

    def _eligible(self, i: int) -> None:
        """Every dependency of ``i`` has finished: it is submitted after its lag."""
        g = self.g
        at, dep, network = self.start, None, 0.0
        for stream, k in g.needs[i]:
            if self.prefix_max[stream][k] > at:
                at, dep = self.prefix_max[stream][k], self.prefix_arg[stream][k]
        trig = g.trigger[i]
        if trig is not None and trig in self.arrival and g.tasks[trig].party != g.tasks[i].party:
            if self.arrival[trig] > at:
                at, dep = self.arrival[trig], trig
                network = at - self._done(trig)
        at += g.lag[i]
        self.held[i] = (dep, g.lag[i], network)  # no dependency: the lag runs from the start
        prev = g.before[i]
        if prev is not None and self._done(prev) > at:
            at = self._done(prev)
            self.held[i] = (prev, 0.0, 0.0)
        heapq.heappush(self.events, (at, next(self.seq), 0, i))

    def _done(self, i: int) -> float:
        done = self.finish[i]
        assert done is not None
        return done

    def _ready(self, i: int, now: float) -> None:
        self.ready_at[i] = now
        t = self.g.tasks[i]
        entry = (int(t.background), i, i)
        if t.place is None:
            heapq.heappush(self.unbound[t.party], entry)
        else:
            heapq.heappush(self.pinned.setdefault((t.party, t.place % self.w), []), entry)

    def _dispatch(self, party: str, now: float) -> None:
        """Idle workers take the ready tasks submitted first (their own place's or any)."""
        idle = self.idle[party]
        unbound = self.unbound[party]
        progress = True
        while idle and progress:
            progress = False
            best: tuple[tuple[int, int, int], int, list[tuple[int, int, int]]] | None = None
            for w in sorted(idle):
                for queue in (self.pinned.get((party, w)), unbound):
                    if queue and (best is None or queue[0] < best[0]):
                        best = (queue[0], w, queue)
            if best is not None:
                entry, w, queue = best
                if queue is unbound:  # a worker with no place's task waiting, if there is one
                    w = next((v for v in sorted(idle) if not self.pinned.get((party, v))), w)
                heapq.heappop(queue)
                idle.discard(w)
                i = entry[2]
                self.started[i] = now
                end = now + self.g.tasks[i].duration
                heapq.heappush(self.events, (end, next(self.seq), 1, i))
                self.running_on[i] = w
                progress = True

    def _finished(self, i: int, now: float) -> None:
        g = self.g
        t = g.tasks[i]
        self.finish[i] = now
        self.idle[t.party].add(self.running_on.pop(i))
        if i in self.sends and self.bandwidth is not None:
            for party in sorted(self.sends[i]):
                link = (t.party, party)
                begin = max(now, self.link_free.get(link, self.start))
                self.link_free[link] = self.arrival[i] = begin + t.out_bytes / self.bandwidth
        elif i in self.sends:
            self.arrival[i] = now
        stream = self.position.get(i)
        if stream is not None:
            self._advance(stream)
        nxt = self.after.get(i)
        if nxt is not None:
            self._unblock(nxt)

    def _advance(self, stream: tuple[str, str]) -> None:
        """Extend ``stream``'s finished prefix and release what waited for it."""
        members = self.g.streams[stream]
        k = self.done_prefix[stream]
        maxima = self.prefix_max[stream]
        args = self.prefix_arg[stream]
        while k < len(members):
            done = self.finish[members[k]]
            if done is None:
                break
            args.append(members[k] if done > maxima[-1] else args[-1])
            maxima.append(max(maxima[-1], done))
            k += 1
        self.done_prefix[stream] = k
        entries = self.waiting.get(stream, [])
        c = self.cursor.get(stream, 0)
        while c < len(entries) and entries[c][0] <= k:
            self._unblock(entries[c][1])
            c += 1
        if stream in self.cursor:
            self.cursor[stream] = c

    def path(self, last: int, tail: float) -> CriticalPath:
        """The critical path back from task ``last`` (module docstring); ``tail``: the
        parties' own time after it."""
        tasks = waits = network = 0.0
        own = tail
        at: int | None = last
        while at is not None:
            tasks += self.g.tasks[at].duration
            waits += self.started[at] - self.ready_at[at]
            at, lag, net = self.held[at]
            own += lag
            network += net
        return CriticalPath(tasks, waits, own, network)

    def _unblock(self, i: int) -> None:
        self.blocked[i] -= 1
        if self.blocked[i] == 0:
            self._eligible(i)


def replay(
    tasks: Sequence[Task],
    workers: int,
    *,
    start: float,
    stop: float | None = None,
    bandwidth: float | None = None,
) -> float:
    """Seconds from ``start`` until the replayed run ends, on ``workers`` workers per party.

    ``stop``: when the measured run ended; the time from its last foreground task to ``stop``
    (the parties' own work after it) is added as it was. ``bandwidth``: bytes per second of the
    network between parties (None: instant)."""
    return _replayed(tasks, workers, start, stop, bandwidth)[0]


def critical_path(
    tasks: Sequence[Task],
    workers: int,
    *,
    start: float,
    stop: float | None = None,
    bandwidth: float | None = None,
) -> CriticalPath:
    """:func:`replay`'s length taken apart along its critical path (module docstring)."""
    return _replayed(tasks, workers, start, stop, bandwidth)[1]


def _replayed(
    tasks: Sequence[Task],
    workers: int,
    start: float,
    stop: float | None,
    bandwidth: float | None,
) -> tuple[float, CriticalPath]:
    """The replay's length (from its tasks' finishing times) and its critical path."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    foreground = [t for t in tasks if not t.background]
    tail = 0.0
    if stop is not None:
        last = max((t.end for t in foreground), default=start)
        tail = max(0.0, stop - last)
    if not foreground:
        length = (stop if stop is not None else start) - start
        return length, CriticalPath(0.0, 0.0, length, 0.0)
    graph = _graph(tasks, start)
    run = _Replay(graph, workers, start, bandwidth)
    finish = run.run()
    ends = [
        (f, i) for i, (f, t) in enumerate(zip(finish, graph.tasks, strict=True)) if not t.background
    ]
    assert all(f is not None for f, _ in ends), "a task never became ready"
    end, last = max((f, i) for f, i in ends if f is not None)
    return end + tail - start, run.path(last, tail)


def scaling(
    tasks: Sequence[Task],
    *,
    start: float,
    stop: float,
    units: float = 1.0,
    widths: Sequence[int] = WIDTHS,
    bandwidth: float | None = None,
    key: str = "s_per_tree",
) -> dict[str, dict[str, Any]]:
    """``{"W": {key: predicted seconds / units, "efficiency": ..., "path": {...}}}`` for each
    width, where efficiency = (seconds at one worker) / (W x seconds at W workers) and
    ``path`` is the prediction taken apart per unit (:meth:`CriticalPath.per`)."""
    one = replay(tasks, 1, start=start, stop=stop, bandwidth=bandwidth)
    out: dict[str, dict[str, Any]] = {}
    for w in widths:
        at, path = _replayed(tasks, w, start, stop, bandwidth)
        out[str(w)] = {
            key: round(at / units, 4),
            "efficiency": round(one / (w * at), 4) if at > 0 else 1.0,
            "path": path.per(units),
        }
    return out
