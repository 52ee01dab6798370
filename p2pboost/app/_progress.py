"""A party's progress and result: where a task reports as it goes, and what it did.

Apart from :mod:`p2pboost.app.party` so that the task runner stays about running tasks; the
command line draws its bars from a :class:`Reporter` and prints a :class:`PartyResult`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from p2pboost.hetero.training.common import GuestPhase, HostPhase, Progress

__all__ = [
    "LogReporter",
    "Meter",
    "PartyResult",
    "Reporter",
    "Tick",
    "TreeClock",
    "host_progress",
]

logger = logging.getLogger("p2pboost.app.party")


@dataclass(frozen=True, slots=True)
class Tick:
    """``done`` of ``total`` (None: not known) ``unit`` of ``what``, ``elapsed`` s since its
    start: a line with the ETA for people, a record with the same figures for log shippers."""

    what: str
    done: int
    total: int | None
    unit: str
    elapsed: float

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far (None before the first unit, without a total)."""
        if not self.total or self.done <= 0:
            return None
        return max(0.0, self.elapsed / self.done * (self.total - self.done))

    def text(self) -> str:
        """``PSI: 12,000/50,000 ids blinded (24%), 2.1 s, about 6.6 s left``."""
        if self.total:
            head = f"{self.what}: {self.done:,}/{self.total:,} {self.unit}"
            head += f" ({self.done / self.total:.0%})"
        else:
            head = f"{self.what}: {self.done:,} {self.unit}"
        eta = self.eta
        left = "" if eta is None or self.done >= (self.total or 0) else f", about {eta:.1f} s left"
        return f"{head}, {self.elapsed:.1f} s{left}"

    def record(self) -> dict[str, Any]:
        """The ``extra`` fields of the JSON log record."""
        eta = self.eta
        return {
            "progress": self.what,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "elapsed_s": round(self.elapsed, 3),
            "eta_s": None if eta is None else round(eta, 3),
        }


class Reporter(Protocol):
    """Where a party's progress goes: a bar of steps, progress ticks, one-off messages.

    ``step`` advances the bar (``record``: the same step's figures for a JSON log record);
    ``progress`` reports work without a bar of its own (PSI, a host's trees).
    """

    def info(self, message: str) -> None: ...

    def begin(self, label: str, total: int) -> None: ...

    def step(self, label: str, record: Mapping[str, Any] | None = None) -> None: ...

    def progress(self, tick: Tick) -> None: ...

    def end(self, message: str) -> None: ...


class LogReporter:
    """Progress as log records (services, ``--log-format json``, and library use)."""

    def __init__(self, log: logging.Logger = logger) -> None:
        self.log = log

    def info(self, message: str) -> None:
        self.log.info(message)

    def begin(self, label: str, total: int) -> None:
        self.log.info("%s (%d steps)", label, total)

    def step(self, label: str, record: Mapping[str, Any] | None = None) -> None:
        self.log.info(label, extra=dict(record or {}))

    def progress(self, tick: Tick) -> None:
        self.log.info(tick.text(), extra=tick.record())

    def end(self, message: str) -> None:
        self.log.info(message)


class Meter:
    """Counts towards a total and sends a :class:`Tick` to a reporter at most every
    ``every`` seconds, and always when the count reaches the total (a PSI of a million ids
    would otherwise log one line per batch)."""

    def __init__(
        self,
        reporter: Reporter,
        what: str,
        unit: str,
        *,
        every: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.reporter = reporter
        self.what, self.unit, self.every = what, unit, every
        self._clock = clock or time.perf_counter
        self._start = self._clock()
        self._last: float | None = None

    def update(self, done: int, total: int | None) -> None:
        now = self._clock()
        final = total is not None and done >= total
        if not final and self._last is not None and now - self._last < self.every:
            return
        self._last = now
        self.reporter.progress(Tick(self.what, done, total, self.unit, now - self._start))


class TreeClock:
    """Each tree's own time, with the run's total beside it, for the per-tree progress line.

    A cumulative figure alone ("(5.7 s)" after tree 10) reads as the time of that tree and
    hides a tree that suddenly takes longer; the per-tree figure shows it, and the total
    stays on the line, labelled, for the ETA a reader works out. Started when the training
    starts, so the first tree's time includes the setup before it (keys, binning).
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.perf_counter
        self._start = self._last = self._clock()

    def lap(self, done: int | None = None, trees: int | None = None) -> str:
        """``(0.6 s, 5.7 s in all)``: the time since the previous tree, and since the start;
        with ``done`` of ``trees``, also about how long the rest takes at the rate so far."""
        now = self._clock()
        tree, total = now - self._last, now - self._start
        self._last = now
        left = ""
        if done and trees and done < trees:
            left = f", about {total / done * (trees - done):.1f} s left"
        return f"({tree:.1f} s, {total:.1f} s in all{left})"


def host_progress(meter: Meter, trees: int) -> Progress:
    """A host's :class:`~p2pboost.hetero.training.common.Progress` that tells ``meter`` each time a
    tree starts (the trees before it are done) and when training ends; ``trees``: the
    guest's count from its plan (0: unknown, no ETA). The protocol keeps its phase and tree
    in this object; a property on ``tree`` turns that into a callback, so the host's
    protocol needs no hook of its own."""
    from p2pboost.hetero.training.common import HostPhase, Progress

    total = trees or None

    class _Trees(Progress):
        @property
        def tree(self) -> int:
            return self._tree

        @tree.setter
        def tree(self, value: int) -> None:
            self._tree = value
            if value > 0:
                meter.update(value, total)

        def enter(self, phase: GuestPhase | HostPhase, depth: int = -1) -> None:
            super().enter(phase, depth)
            if phase is HostPhase.DONE and self._tree >= 0:
                meter.update(max(self._tree + 1, total or 0), total)

    return _Trees(HostPhase.SETUP)


@dataclass(frozen=True, slots=True)
class PartyResult:
    """What a task did: files written and a few figures (the CLI prints it as JSON)."""

    party: str
    role: str
    task: str
    outputs: tuple[str, ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "party": self.party,
            "role": self.role,
            "task": self.task,
            "outputs": list(self.outputs),
            **self.summary,
        }


# -- the node ---------------------------------------------------------------------------------
