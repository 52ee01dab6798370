"""What a party run does when a peer fails: resume after a restart, or say what to check.

A vertical training with checkpoints survives any party's crash: the operator starts the
crashed party again with ``p2pboost party --resume``; its new process connects, every other
party's node sees a *restart* (a new process that lost its state, not a dropped link) and
their training fails with :class:`~p2pboost.exceptions.PeerDisconnected` (``restarted``).
Instead of ending there, a party whose own checkpoints are on runs its task again, resuming:
the parties redo the settings check and PSI (the restarted one needs them), agree on the last
tree every one of them holds (:mod:`p2pboost.hetero.training.checkpoint`) and grow the rest, to the
model an uninterrupted run grows. A horizontal client whose server restarted joins its new
run the same way (it keeps no state: the server resumes from its checkpoint and sends the
model so far); a restarted client is taken back by the running server itself
(:mod:`p2pboost.homo._federation`). Any other failure, or more than :data:`RESUMES` restarts,
ends the run with an error that says what to check (:func:`explain`). When that error ends a
training whose checkpoints hold trees of this run, it also names the command that continues
it (:func:`resume_hint`): the party that kept running exits too, so after a crash nobody is
left to resume on their own, and the operator reading the error needs the command.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from p2pboost.app.config import PartyConfig, Role, Task
from p2pboost.exceptions import PeerDisconnected

__all__ = ["RESUMES", "explain", "resume_hint", "resume_on_restart"]

#: Slack, in seconds, for file systems whose modification times are coarse (FAT: 2 s).
_MTIME_SLACK = 2.0

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


def resume_hint(config: PartyConfig, since: float) -> str:
    """How to continue this training from its checkpoints, or "" when there is nothing to
    continue from: a training task, checkpoints on, and a checkpoint file of this run (written
    after ``since``, a ``time.time()``; with ``--resume`` an older one counts too, it is the
    run). A stale file of an earlier run would send the operator to a resume that refuses it."""
    path = config.checkpoint_path
    if config.task is not Task.TRAIN or path is None:
        return ""
    try:
        saved = [
            f
            for f in path.glob("*.ckpt")
            if config.train.resume or f.stat().st_mtime >= since - _MTIME_SLACK
        ]
    except OSError:
        return ""
    if not saved:
        return ""
    return (
        f". The trees grown so far are in the checkpoints in {path}: once the parties can run"
        f" again, continue this training with `p2pboost party --config {config.source}"
        " --resume` (every other party likewise, with its own file; see"
        " docs/how-to/resume-training.md)"
    )


def explain(exc: PeerDisconnected, config: PartyConfig, since: float) -> PeerDisconnected:
    """``exc`` with what to check: the peer's address and the timeout, or ``--resume``; and
    the command that resumes this training when its checkpoints hold some of it."""
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
        f"node.reconnect_timeout = {config.node.reconnect_timeout:g} s)"
        f"{resume_hint(config, since)}",
    )
