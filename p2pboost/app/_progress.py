"""A party's progress and result: where a task reports as it goes, and what it did.

Apart from :mod:`p2pboost.app.party` so that the task runner stays about running tasks; the
command line draws its bars from a :class:`Reporter` and prints a :class:`PartyResult`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["LogReporter", "PartyResult", "Reporter", "TreeClock"]

logger = logging.getLogger("p2pboost.app.party")


class Reporter(Protocol):
    """Where a party's progress goes: a bar of steps, and one-off messages."""

    def info(self, message: str) -> None: ...

    def begin(self, label: str, total: int) -> None: ...

    def step(self, label: str) -> None: ...

    def end(self, message: str) -> None: ...


class LogReporter:
    """Progress as log records (services, ``--log-format json``, and library use)."""

    def __init__(self, log: logging.Logger = logger) -> None:
        self.log = log

    def info(self, message: str) -> None:
        self.log.info(message)

    def begin(self, label: str, total: int) -> None:
        self.log.info("%s (%d steps)", label, total)

    def step(self, label: str) -> None:
        self.log.info(label)

    def end(self, message: str) -> None:
        self.log.info(message)


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

    def lap(self) -> str:
        """``(0.6 s, 5.7 s in all)``: the time since the previous tree, and since the start."""
        now = self._clock()
        tree, total = now - self._last, now - self._start
        self._last = now
        return f"({tree:.1f} s, {total:.1f} s in all)"


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
