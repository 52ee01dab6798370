"""What every executor with addressable workers offers, and how stateful kernels declare
what they do to a worker's state (so that a cluster can rebuild it).

Some work keeps state in a worker between tasks (a vertical host's row shard of a tree's
ciphertexts). On a local :class:`~p2pboost.workers.PinnedPool` that state lives as long as the
pool. On a cluster a worker can die and come back empty; the executor then has to rebuild the
state before the next task that needs it. It can, without knowing what the state is, if every
kernel that touches state says how its call changes the *log* of calls that rebuild it
(:func:`stateful`): most calls are appended (the state after them is the state after the log
replayed), the call that creates a state starts a new log, a call that returns the state to
how it was after its first call (the end of a tree: back to the run's settings) rewinds the log
to its first entry, and the call that drops the state clears it. A kernel that finds no state
under its name raises :class:`~p2pboost.exceptions.WorkerStateLost`, and the executor replays
the log in a live worker and runs the task again. Kernels must therefore be deterministic
functions of the state and their arguments (ours are: no randomness, no clock).

The first argument of a stateful kernel names its state (a token the caller draws), so several
states can share a worker and a log is kept per name.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

__all__ = ["Log", "PinnedExecutor", "log_effect", "stateful"]

P = ParamSpec("P")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_LOG_ATTRIBUTE = "__p2pboost_log__"


class Log(enum.Enum):
    """What a successful call of a stateful kernel does to its state's replay log."""

    #: The call changes the state: it is appended.
    APPEND = "append"
    #: The call creates the state: the log starts again with it.
    START = "start"
    #: The call takes the state back to how the log's first call left it: the log keeps that.
    REWIND = "rewind"
    #: The call drops the state: the log is dropped too.
    CLEAR = "clear"


def stateful(log: Log = Log.APPEND) -> Callable[[F], F]:
    """Declare a module-level function a kernel on a worker's named state (its first argument
    names it), and what a call does to the state's replay log."""

    def mark(fn: F) -> F:
        setattr(fn, _LOG_ATTRIBUTE, log)
        return fn

    return mark


def log_effect(fn: Callable[..., Any]) -> Log | None:
    """How a call of ``fn`` changes its state's log, or None for a task that keeps no state."""
    effect = getattr(fn, _LOG_ATTRIBUTE, None)
    return effect if isinstance(effect, Log) else None


class PinnedExecutor(Executor, abc.ABC):
    """An executor whose tasks can also be sent to one of :attr:`workers` places, each running
    its tasks one at a time in the order sent, so that state a task leaves behind is there for
    the next task sent to the same place."""

    @property
    @abc.abstractmethod
    def workers(self) -> int:
        """How many places tasks can be sent to (and so how many states can be spread)."""

    @abc.abstractmethod
    def submit_to(
        self, worker: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` at place ``worker``, after the tasks sent there before."""

    def keyholder(self) -> Executor:
        """The executor for tasks that carry a private key (decryption).

        This one, for a pool on the party's own machine. A cluster answers with the party's own
        processes or the workers it was told to trust with the key, so a private key never
        reaches any other machine.
        """
        return self

    def start(self) -> None:
        """Start every place now rather than on its first task."""
