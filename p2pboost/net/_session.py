"""Sessions: the channels of one protocol run with a fixed set of peers, and their states.

A :class:`Session` groups the channels (:mod:`p2pboost.net._channel`) of one protocol run (one
training, one batch of predictions) with a fixed set of peers. It owns its states (the
transition tables of :mod:`p2pboost.net._states`): its life (open, closed, failed), who
claimed it here, and each peer's side of it. Nothing else moves them: the multiplexer
(:mod:`p2pboost.net._mux`) tells the session what happened, through the methods below whose
names say the event (:meth:`Session.fail`, :meth:`~Session.peer_left`,
:meth:`~Session.accept`, ...), and the session asks its table, which raises
:class:`~p2pboost.exceptions.LocalProtocolError` for a transition it does not have.

What a session needs of the multiplexer is as narrow (:class:`SessionHost`): the party's id,
the configuration, the links, and a way to be forgotten once it ended, so this module never
imports the multiplexer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Protocol

from p2pboost.exceptions import InputError, LocalProtocolError, P2PBoostError, SessionClosed
from p2pboost.net._channel import Channel, ended_error
from p2pboost.net._frames import abort_frame, close_frame, encode_name
from p2pboost.net._link import Link
from p2pboost.net._states import Claim, Event, PeerSide, SessionState, SessionStates
from p2pboost.net.config import NodeConfig

__all__ = ["STOPPED", "Session", "SessionHost"]

logger = logging.getLogger("p2pboost.net.node")
#: What the peers of a session are told when this party stopped it on purpose (cancelled).
STOPPED = "the peer stopped its side (interrupted, stopped or timed out)"


class SessionHost(Protocol):
    """What a session needs of the multiplexer that holds it (:class:`~p2pboost.net._mux.Mux`)."""

    @property
    def party_id(self) -> str: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def links(self) -> Mapping[str, Link]: ...

    def forget(self, session: Session) -> None:
        """The session ended: free its id and count its channels' statistics."""


class Session:
    """One protocol run with a fixed set of peers. Create with :meth:`Node.session`.

    Use it as an async context manager: leaving it closes the session (peers see
    :class:`SessionClosed` once they have read what was sent before).
    """

    def __init__(
        self,
        mux: SessionHost,
        session_id: str,
        peers: Iterable[str],
        *,
        opener: str | None = None,
    ):
        """Made by the multiplexer: ``opener`` is the peer whose frame opened it here (the
        session is then pending, that peer's alone until claimed); ``None``: opened by the
        application with its declared ``peers``. Raises ValueError for a bad id."""
        self._sid = encode_name(session_id)  # first: a bad id raises ValueError
        self.id = session_id
        self._mux = mux
        self.opener = opener
        self._states = SessionStates(
            peers, claim=Claim.DECLARED if opener is None else Claim.PENDING
        )
        self.error: P2PBoostError | None = None
        self._channels: dict[tuple[str, str], Channel] = {}
        self.created_at = asyncio.get_running_loop().time()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} peers={list(self.peers)} {self.state.value}>"

    @property
    def state(self) -> SessionState:
        """Where the session is in its life (moved only by the session's own table)."""
        return self._states.session

    @property
    def claimed(self) -> bool:
        """Whether the application here has claimed the session (or opened it)."""
        return self._states.claim is not Claim.PENDING

    @property
    def declared(self) -> bool:
        """Whether its peers were declared (``Node.session``): then the id is theirs here."""
        return self._states.claim is Claim.DECLARED

    @property
    def peers(self) -> tuple[str, ...]:
        """The parties in this session (besides this node), sorted."""
        return tuple(sorted(self._states.sides))

    def channel(self, peer: str, name: str = "default") -> Channel:
        """The channel ``name`` to ``peer`` (the same object on every call)."""
        if peer not in self._states.sides:
            raise InputError(f"{peer!r} is not a peer of session {self.id!r}: {self.peers}")
        ch = self._channels.get((peer, name))
        if ch is None:
            if self.state is not SessionState.OPEN:
                raise ended_error(self)
            if len(self._channels) >= self._mux.config.max_channels_per_session:
                raise LocalProtocolError(f"session {self.id!r} has too many channels")
            try:
                ch = self.add_channel(peer, name)
            except ValueError as exc:
                raise InputError(f"bad channel name {name!r}: {exc}") from exc
        return ch

    async def close(self) -> None:
        """Leave the session; frames already sent are still delivered. Idempotent."""
        if self.state is SessionState.CLOSED:
            return
        if self.state is SessionState.OPEN:
            for peer in self._present():
                link = self._mux.links[peer]
                seq = link.alloc_seq()
                link.push(seq, (close_frame(seq, self._sid),), None)
        self._states.apply(Event.CLOSE)
        self._release()
        self._mux.forget(self)

    async def abort(self, reason: str = "aborted", *, failed: bool = True) -> None:
        """End the session on an error: peers get :class:`SessionClosed` carrying ``reason``
        at once (unread data is dropped on both sides). Idempotent; then closes it.
        ``failed=False``: this party stopped on purpose, logged as such rather than as a
        failure (the peers' runs still end, they learn the reason)."""
        self.fail(
            SessionClosed(f"session {self.id!r} aborted locally", reason=reason),
            wire_reason=reason,
            level=logging.WARNING if failed else logging.INFO,
        )
        await self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or self.state is not SessionState.OPEN:
            await self.close()
        elif issubclass(exc_type, asyncio.CancelledError):
            # Stopped here (Ctrl-C, SIGTERM, a task cancelled by its owner): a clean stop, not
            # a failure; the peers learn that this party stopped, not an exception's name.
            await self.abort(STOPPED, failed=False)
        else:
            # Tell the peers the run failed, but only the exception's type: its message may
            # hold local data that is not theirs to see.
            await self.abort(f"peer code raised {exc_type.__name__}")

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet consumed, over all channels."""
        return sum(ch.buffered_bytes for ch in self._channels.values())

    # -- what a channel reads (ChannelSession) ------------------------------------------------

    def side(self, peer: str) -> PeerSide:
        """``peer``'s side of the session (every channel to that peer reads it)."""
        return self._states.side(peer)

    def open_to(self, peer: str) -> bool:
        """Whether the session is open and ``peer`` a member whose side is open: the one
        question every data frame and every send asks, answered by one lookup."""
        return self._states.open_to(peer)

    # -- the multiplexer's side (p2pboost.net._mux; applications never call these) ------------
    # Each method is one event of the tables in p2pboost.net._states, named after it.

    def is_member(self, peer: str) -> bool:
        """Whether ``peer`` belongs to the session (its frames may touch it)."""
        return peer in self._states.sides

    def has_left(self, peer: str) -> bool:
        """Whether ``peer`` closed its side (or restarted): it may send nothing more."""
        return self._states.side(peer) is not PeerSide.OPEN

    def find_channel(self, peer: str, name: str) -> Channel | None:
        """The channel ``name`` to ``peer`` if it exists (frames never create one here)."""
        return self._channels.get((peer, name))

    @property
    def channel_count(self) -> int:
        """How many channels the session holds (bounded by ``max_channels_per_session``)."""
        return len(self._channels)

    def channels(self) -> Iterator[tuple[str, Channel]]:
        """Every channel with its peer (for the statistics)."""
        for (peer, _), ch in self._channels.items():
            yield peer, ch

    def add_channel(self, peer: str, name: str) -> Channel:
        """A new channel ``name`` to ``peer``, without the application's checks (the
        multiplexer applies the peer's limits itself). Raises ValueError for a bad name."""
        ch = Channel(
            self, peer, name, link=self._mux.links[peer], config=self._mux.config, fail=self.fail
        )
        self._channels[(peer, name)] = ch
        return ch

    def accept(self) -> None:
        """Event ACCEPT: ``Node.accept_session`` claimed this pending session as its peer's."""
        self._states.apply(Event.ACCEPT)

    def declare(self, peers: Iterable[str]) -> None:
        """Event DECLARE: ``Node.session(id, peers)`` claimed this pending session (joined
        to the other declared peers' already) with ``peers`` as its members."""
        self._states.apply(Event.DECLARE)
        self._states.set_members(peers)

    def fail(
        self,
        error: P2PBoostError,
        *,
        notify_except: str | None = None,
        wire_reason: str | None = None,
        level: int | None = logging.WARNING,
        tell: bool = True,
    ) -> None:
        """Event FAIL: end the session on ``error``, wake everyone, free buffers and tell the
        peers why (``wire_reason``, default ``str(error)``: our own diagnosis of a peer's
        fault), but ``notify_except``, who knows. Nothing if it ended already.

        ``level``: how to log it (``None``: the caller logged it); ``tell=False``: the caller
        tells the peers itself (a claim that joins sessions, see :meth:`tell_failed`).
        """
        if self.state is not SessionState.OPEN:
            return
        self._states.apply(Event.FAIL)
        self.error = error
        if level is not None and level >= logging.WARNING:
            logger.log(level, "%s: session %r failed: %s", self._mux.party_id, self.id, error)
        elif level is not None:
            logger.log(level, "%s: session %r stopped here", self._mux.party_id, self.id)
        if tell:
            reason = str(error) if wire_reason is None else wire_reason
            self.tell_failed(self.peers, reason, notify_except=notify_except)
        self._release()

    def tell_failed(
        self, peers: Iterable[str], reason: str, *, notify_except: str | None = None
    ) -> None:
        """Drop the session's unacknowledged frames to ``peers`` (a failed run's data is of no
        use to them), and tell each why in an ABORT (but ``notify_except``, who knows)."""
        for peer in peers:
            link = self._mux.links[peer]
            link.withdraw(self.id)
            if peer != notify_except and not self._gone(peer):
                seq = link.alloc_seq()
                link.push(seq, (abort_frame(seq, self._sid, reason),), None)

    def drop(self) -> None:
        """Event DROP: the node shut down under the session; free it, send nothing."""
        self._states.apply(Event.DROP)
        self._release()

    def absorb(self, other: Session) -> None:
        """Take over ``other``'s channels and its peers' sides (another peer's frames for the
        same session, kept apart until the application claimed the session with both)."""
        for key, ch in other._channels.items():
            ch.bind(self, self.fail)
            self._channels[key] = ch
            if self.state is not SessionState.OPEN:
                ch.release()
        self._states.merge(other._states)
        self.created_at = min(self.created_at, other.created_at)

    def peer_left(self, peer: str) -> None:
        """Event LEAVE: ``peer`` closed its side (a CLOSE frame). A second CLOSE, or one from
        a peer that restarted meanwhile, is news of nothing and changes nothing."""
        if not self._states.allows(Event.LEAVE, peer):
            return
        self._states.apply(Event.LEAVE, peer)
        for ch in self._peer_channels(peer):
            ch.feed_eof()

    def peer_restarted(self, peer: str) -> None:
        """Event RESTART: ``peer`` restarted and lost its state (the multiplexer then fails
        the session); its id is not remembered as ended for that peer (see :meth:`ended_for`)."""
        self._states.apply(Event.RESTART, peer)

    def ended_for(self) -> list[str]:
        """The peers whose late frames for this session are to be dropped once it ended (all
        but those that restarted: their new process may reopen the id to resume)."""
        return [p for p, s in self._states.sides.items() if s is not PeerSide.RESTARTED]

    def present(self) -> list[str]:
        """The peers that have not left the session, sorted."""
        return self._present()

    def wake(self, peer: str) -> None:
        """The link to ``peer`` came up or went down: its channels look at it again."""
        for ch in self._peer_channels(peer):
            ch.wake()

    def release(self) -> None:
        """Drop what every channel buffers and wake their waiters (the session ended)."""
        self._release()

    # -- helpers ------------------------------------------------------------------------------

    def _present(self) -> list[str]:
        return [p for p in self.peers if not self._gone(p)]

    def _gone(self, peer: str) -> bool:
        side = self._states.sides.get(peer)
        return side is PeerSide.LEFT

    def _peer_channels(self, peer: str) -> list[Channel]:
        return [ch for (p, _), ch in self._channels.items() if p == peer]

    def _release(self) -> None:
        for ch in self._channels.values():
            ch.release()
