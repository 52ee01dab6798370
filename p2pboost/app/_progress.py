"""A party's progress and result: where a task reports as it goes, and what it did.

Apart from :mod:`p2pboost.app.party` so that the task runner stays about running tasks; the
command line draws its bars from a :class:`Reporter` and prints a :class:`PartyResult`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["LogReporter", "PartyResult", "Reporter"]

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
