"""What a party run does when a peer fails: resume after a restart, or say what to check.

A vertical training with checkpoints survives any party's crash: the operator starts the
crashed party again with ``p2pboost party --resume``; its new process connects, every other
party's node sees a *restart* (a new process that lost its state, not a dropped link) and
their training fails with :class:`~p2pboost.exceptions.PeerDisconnected` (``restarted``).
Instead of ending there, a party whose own checkpoints are on runs its task again, resuming:
the parties redo the settings check and PSI (the restarted one needs them), agree on the last
tree every one of them holds (:mod:`p2pboost.hetero.checkpoint`) and grow the rest, to the
model an uninterrupted run grows. A horizontal client whose server restarted joins its new
run the same way (it keeps no state: the server resumes from its checkpoint and sends the
model so far); a restarted client is taken back by the running server itself
(:mod:`p2pboost.homo._federation`). Any other failure, or more than :data:`RESUMES` restarts,
ends the run with an error that says what to check (:func:`explain`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from p2pboost.app.config import PartyConfig, Role, Task
from p2pboost.exceptions import PeerDisconnected

__all__ = ["RESUMES", "explain", "resume_on_restart"]

#: Times a vertical party resumes its training from its checkpoints after a peer restarted.
RESUMES = 3

T = TypeVar("T")


async def resume_on_restart(
    config: PartyConfig, attempt: Callable[[PartyConfig], Awaitable[T]], info: Callable[[str], None]
) -> T:
    """``attempt(config)``; if it is vertical training with checkpoints, or a horizontal
    client, and a peer restarts, ``attempt`` again resuming, up to :data:`RESUMES` times
    (``info`` says so each time)."""
    resumable = config.task is Task.TRAIN and (
        config.role is Role.CLIENT
        or (config.role in (Role.GUEST, Role.HOST) and config.checkpoint_path is not None)
    )
    current = config
    for n in range(1, RESUMES + 1):
        try:
            return await attempt(current)
        except PeerDisconnected as exc:
            if not (resumable and exc.restarted):
                raise
            info(
                f"{exc.peer!r} restarted: continuing from the checkpoints (resume {n} of {RESUMES})"
            )
            current = config.with_resume()
    return await attempt(current)


def explain(exc: PeerDisconnected, config: PartyConfig) -> PeerDisconnected:
    """``exc`` with what to check: the peer's address and the timeout, or ``--resume``."""
    if exc.restarted:
        return PeerDisconnected(
            exc.peer,
            f"{exc} and lost its state; start it again with --resume to continue a training "
            f"from the checkpoints ([train] checkpoint_dir in {config.source})",
            restarted=True,
        )
    address = config.peers.get(exc.peer)
    where = f"at {address}" if address else "(it dials us)"
    return PeerDisconnected(
        exc.peer,
        f"{exc}; is party {exc.peer!r} {where} running? (peers in {config.source}; "
        f"node.reconnect_timeout = {config.node.reconnect_timeout:g} s)",
    )
