"""The online requests a :class:`~p2pboost.hetero.inference.predictor.GuestPredictor` queues
for its micro-batches, each resolved on its own future or as a place in a :class:`Group`.

The dispatcher (:class:`~p2pboost.hetero.inference.batcher.MicroBatcher`) treats both alike
(``done``, ``set_result``, ``set_exception``): a group is one entry of its queue, split
where a micro-batch is full (so its requests may ride several), and only the group's one
future wakes its waiter, once the last outcome is known.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PENDING", "Group", "Request"]

F64 = npt.NDArray[np.float64]

#: An outcome of a group's request not known yet.
PENDING: Any = object()


class Group:
    """The outcomes of the requests of one
    :meth:`~p2pboost.hetero.inference.predictor.GuestPredictor.submit_many` call, and the
    one future that resolves when the last of them is known.

    A list message of a few hundred requests then costs one future, one queue entry and one
    wake-up of its waiter, not one of each per request.
    """

    __slots__ = ("future", "outcomes", "pending")

    def __init__(self, future: asyncio.Future[list[Any]], n: int) -> None:
        self.future = future
        self.outcomes: list[Any] = [PENDING] * n
        self.pending = n

    def settle(self, index: int, outcome: Any) -> None:
        if self.outcomes[index] is not PENDING:
            return
        self.outcomes[index] = outcome
        self.pending -= 1
        if not self.pending and not self.future.done():
            self.future.set_result(self.outcomes)


@dataclass(slots=True)
class Request:
    """One queued request: its own ``future``, or a place ``index`` in a ``group``."""

    id: Any
    x: F64 | None
    future: asyncio.Future[Any] | None
    #: Resolve to ``(score, reasons)`` rather than the score.
    reasons: bool = False
    group: Group | None = None
    index: int = 0

    def done(self) -> bool:
        if self.group is not None:
            return self.group.future.done() or self.group.outcomes[self.index] is not PENDING
        assert self.future is not None
        return self.future.done()

    def set_result(self, value: Any) -> None:
        if self.group is not None:
            self.group.settle(self.index, value)
        elif self.future is not None and not self.future.done():
            self.future.set_result(value)

    def set_exception(self, exc: BaseException) -> None:
        if self.group is not None:
            self.group.settle(self.index, exc)
        elif self.future is not None and not self.future.done():
            self.future.set_exception(exc)
