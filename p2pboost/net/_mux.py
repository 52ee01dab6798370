"""Sessions, and the multiplexer that owns them: admission, frame dispatch, limits.

A :class:`Session` groups the channels (:mod:`p2pboost.net._channel`) of one protocol run (one
training, one batch of predictions) with a fixed set of peers. Many sessions share one link
per peer; the :class:`Mux` is what sits between the links and the sessions:

* it **dispatches** every frame a link delivers to the session and channel it names, creating
  channels (and sessions a peer opens) on demand, within ``max_sessions``,
  ``max_sessions_per_peer`` and ``max_channels_per_session``;
* it **keeps peers apart**: a frame from a party only ever touches sessions that party
  belongs to. What arrives for a session nobody here claimed yet waits per (session, sending
  peer) until the application claims it and says who belongs (see :class:`Mux`);
* it **refuses** what a peer may not do (a frame for a session it is not part of, a session
  beyond the limits) with an ABORT to that peer alone, and remembers recently ended sessions
  (per session and peer) so that their late frames are dropped rather than taken for new ones;
* it **opens and claims** sessions (``Node.session`` and ``Node.accept_session`` delegate).

The node (:mod:`p2pboost.net.node`) owns everything about time and connections: it tells the
multiplexer when a peer restarted, when a link changed state, which sessions waited too long
(:meth:`Mux.unclaimed`, :meth:`Mux.waiting_on`, :meth:`Mux.fail`), and when to close; the
multiplexer never imports it (configuration, peers and links come in its constructor).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterable, Mapping
from types import TracebackType

from p2pboost.exceptions import (
    InputError,
    LocalProtocolError,
    P2PBoostError,
    PeerDisconnected,
    RemoteProtocolError,
    SessionClosed,
)
from p2pboost.net._channel import Channel, SessionState, ended_error
from p2pboost.net._frames import (
    Abort,
    Close,
    Credit,
    Data,
    Frame,
    abort_frame,
    close_frame,
    encode_name,
)
from p2pboost.net._link import Link
from p2pboost.net.config import NodeConfig

__all__ = ["Mux", "Session"]

logger = logging.getLogger("p2pboost.net.node")
#: What the peers of a session are told when this party stopped it on purpose (cancelled).
STOPPED = "the peer stopped its side (interrupted, stopped or timed out)"


class Session:
    """One protocol run with a fixed set of peers. Create with :meth:`Node.session`.

    Use it as an async context manager: leaving it closes the session (peers see
    :class:`SessionClosed` once they have read what was sent before).
    """

    def __init__(
        self,
        mux: Mux,
        session_id: str,
        peers: Iterable[str],
        *,
        claimed: bool,
        opener: str | None = None,
    ):
        self._sid = encode_name(session_id)  # first: a bad id raises ValueError
        self.id = session_id
        self._mux = mux
        self._peers = set(peers)
        self.claimed = claimed
        self.opener = opener  # the peer whose frame opened it here (None: opened locally)
        # Declared peers (Node.session): the id is theirs, others are refused; accepted (a
        # peer opened it): it is that peer's, and the id stays free for others.
        self._declared = False
        self.state = SessionState.OPEN
        self.error: P2PBoostError | None = None
        self._channels: dict[tuple[str, str], Channel] = {}
        self._peer_closed: set[str] = set()
        self._reset: set[str] = set()  # peers that restarted while it ran (see peer_reset)
        self.created_at = asyncio.get_running_loop().time()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} peers={sorted(self._peers)} {self.state.value}>"

    @property
    def peers(self) -> tuple[str, ...]:
        """The parties in this session (besides this node), sorted."""
        return tuple(sorted(self._peers))

    def channel(self, peer: str, name: str = "default") -> Channel:
        """The channel ``name`` to ``peer`` (the same object on every call)."""
        if peer not in self._peers:
            raise InputError(f"{peer!r} is not a peer of session {self.id!r}: {self.peers}")
        ch = self._channels.get((peer, name))
        if ch is None:
            if self.state is not SessionState.OPEN:
                raise ended_error(self)
            if len(self._channels) >= self._mux.config.max_channels_per_session:
                raise LocalProtocolError(f"session {self.id!r} has too many channels")
            try:
                ch = self._new_channel(peer, name)
            except ValueError as exc:
                raise InputError(f"bad channel name {name!r}: {exc}") from exc
        return ch

    async def close(self) -> None:
        """Leave the session; frames already sent are still delivered. Idempotent."""
        if self.state is SessionState.CLOSED:
            return
        if self.state is SessionState.OPEN:
            for peer in sorted(self._peers - self._peer_closed):
                link = self._mux.links[peer]
                seq = link.alloc_seq()
                link.push(seq, (close_frame(seq, self._sid),), None)
        self.state = SessionState.CLOSED
        self._release()
        self._mux._forget(self)

    async def abort(self, reason: str = "aborted", *, failed: bool = True) -> None:
        """End the session on an error: peers get :class:`SessionClosed` carrying ``reason``
        at once (unread data is dropped on both sides). Idempotent; then closes it.
        ``failed=False``: this party stopped on purpose, logged as such rather than as a
        failure (the peers' runs still end, they learn the reason)."""
        self._fail(
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

    # -- used by the multiplexer --------------------------------------------------------------

    def _new_channel(self, peer: str, name: str) -> Channel:
        ch = Channel(
            self,
            peer,
            name,
            link=self._mux.links[peer],
            config=self._mux.config,
            fail=self._fail,
            peer_left=peer in self._peer_closed,
        )
        self._channels[(peer, name)] = ch
        return ch

    def _fail(
        self,
        error: P2PBoostError,
        *,
        notify_except: str | None = None,
        wire_reason: str | None = None,
        level: int = logging.WARNING,
    ) -> None:
        """End the session on ``error``: wake everyone, free buffers, tell the peers why
        (``wire_reason``, default ``str(error)``: our own diagnosis of a peer's fault)."""
        if self.state is not SessionState.OPEN:
            return
        self.state = SessionState.FAILED
        self.error = error
        if level >= logging.WARNING:
            logger.log(level, "%s: session %r failed: %s", self._mux.party_id, self.id, error)
        else:
            logger.log(level, "%s: session %r stopped here", self._mux.party_id, self.id)
        reason = str(error) if wire_reason is None else wire_reason
        self._tell_failed(sorted(self._peers), reason, notify_except=notify_except)
        self._release()

    def _tell_failed(
        self, peers: Iterable[str], reason: str, *, notify_except: str | None = None
    ) -> None:
        """Drop the session's unacknowledged frames to ``peers`` (a failed run's data is of no
        use to them), and tell each why in an ABORT (but ``notify_except``, who knows)."""
        for peer in peers:
            link = self._mux.links[peer]
            link.withdraw(self.id)
            if peer != notify_except and peer not in self._peer_closed:
                seq = link.alloc_seq()
                link.push(seq, (abort_frame(seq, self._sid, reason),), None)

    def _release(self) -> None:
        for ch in self._channels.values():
            ch.release()

    def _absorb(self, other: Session) -> None:
        """Take over ``other``'s channels (another peer's frames for the same session, kept
        apart until the application claimed the session with both peers)."""
        for key, ch in other._channels.items():
            ch.bind(self, self._fail)
            self._channels[key] = ch
        self._peer_closed |= other._peer_closed
        self.created_at = min(self.created_at, other.created_at)

    def _peer_left(self, peer: str) -> None:
        self._peer_closed.add(peer)
        for (p, _), ch in self._channels.items():
            if p == peer:
                ch.feed_eof()

    def _wake_peer(self, peer: str) -> None:
        for (p, _), ch in self._channels.items():
            if p == peer:
                ch.wake()


#: ABORTs for sessions not opened yet that a node keeps (the oldest are forgotten first).
EARLY_ABORTS_KEPT = 256


class Mux:
    """The sessions of one node and the dispatch of every frame its links deliver.

    ``peers`` are the party ids the node knows, ``links`` its link per peer (filled when the
    node starts; shared, not copied).

    **A frame from a party only ever touches sessions that party belongs to.** Sessions the
    application has claimed are keyed by id; what arrives for a session nobody here claimed
    yet is kept per (session id, sending peer), each such *pending* session holding only that
    peer's channels, counted against that peer's limits, failing only on that peer's faults and
    expiring on its own clock. Claiming decides who belongs:

    * ``Node.session(id, peers)`` adopts the declared peers' pending frames and refuses every
      other peer's (an ABORT to that peer alone, its buffers freed); from then on the id is
      the declared peers' and anyone else's frames for it are refused;
    * ``Node.accept_session()`` hands out one peer's pending session at a time, as that peer's
      session: another peer's frames for the same id stay apart, and are handed out in turn
      once the first is over. A stranger who writes first cannot take the id from the peer
      the application waits for.
    """

    def __init__(
        self,
        party_id: str,
        config: NodeConfig,
        peers: Collection[str],
        links: Mapping[str, Link],
    ) -> None:
        self.party_id = party_id
        self.config = config
        self.links = links
        self._known = frozenset(peers)
        self._sessions: dict[str, Session] = {}  # claimed by the application, by id
        self._pending: dict[tuple[str, str], Session] = {}  # unclaimed, by (id, peer), in order
        # (id, peer) of recently ended sessions: their late frames are dropped.
        self._ended: OrderedDict[tuple[str, str], None] = OrderedDict()
        # ABORTs for sessions nobody here has opened yet, by (id, peer): (reason, when). The
        # application may open the session later; it must then fail at once, not wait for a
        # peer that has already given up (bounded, and expiring after ``unclaimed_timeout``).
        self._early_aborts: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._opened: Counter[str] = Counter()  # live sessions each peer opened here
        self._incoming = asyncio.Event()  # a pending session may be ready for accept()
        self._refusing = False  # the node is closing: peers may open no new session
        self._closed = False  # the node closed: accept() waits no more
        # Messages counted on channels of sessions that ended, per peer (for the statistics).
        self._ended_sent: dict[str, int] = dict.fromkeys(self._known, 0)
        self._ended_received: dict[str, int] = dict.fromkeys(self._known, 0)

    # -- the application's side (through the node) --------------------------------------------

    def check_peers(self, peers: Iterable[str]) -> set[str]:
        """``peers`` as a set, if it is a non-empty set of known parties (else InputError)."""
        declared = set(peers)
        if not declared:
            raise InputError("a session needs at least one peer")
        unknown = declared - self._known
        if unknown:
            raise InputError(f"unknown peers {sorted(unknown)}; known: {sorted(self._known)}")
        return declared

    def open(self, session_id: str, peers: Iterable[str] | None) -> Session:
        """Open session ``session_id`` with ``peers``, adopting what they sent for it already
        (see :meth:`Node.session <p2pboost.net.node.Node.session>`)."""
        if session_id in self._sessions:
            raise LocalProtocolError(f"session {session_id!r} is already open")
        waiting = [s for (sid, _), s in self._pending.items() if sid == session_id]
        if peers is None:
            if waiting:
                return self._claim(waiting[0])
            raise InputError(f"session {session_id!r} is new: give its peers")
        declared = self.check_peers(peers)
        adopted = [s for s in waiting if s.opener in declared]
        strangers = [s for s in waiting if s.opener not in declared]
        if not adopted and self.session_count - len(strangers) >= self.config.max_sessions:
            raise LocalProtocolError(
                f"too many concurrent sessions (max_sessions={self.config.max_sessions})"
            )
        told: set[str] = set()  # peers that already know the session failed
        if adopted:
            session, told = self._adopt(adopted)
        else:
            try:
                session = Session(self, session_id, declared, claimed=True)
            except ValueError as exc:
                raise InputError(f"bad session id {session_id!r}: {exc}") from exc
        for stranger in strangers:
            self._refuse(stranger, "not a member of this session")
        session.claimed = session._declared = True
        session._peers = declared
        for peer in declared:
            self._ended.pop((session_id, peer), None)
        self._sessions[session_id] = session
        if session.state is not SessionState.OPEN:  # a peer broke the rules before the claim
            session._tell_failed(sorted(declared - told), str(session.error))
        self._apply_early_abort(session, declared)
        return session

    def _remember_abort(self, sid: str, peer: str, reason: str) -> None:
        """Keep an ABORT for a session not opened here (unless it is late news of one ended)."""
        if (sid, peer) in self._ended:
            return
        self._early_aborts[(sid, peer)] = (reason, asyncio.get_running_loop().time())
        self._early_aborts.move_to_end((sid, peer))
        while len(self._early_aborts) > EARLY_ABORTS_KEPT:
            self._early_aborts.popitem(last=False)

    def _apply_early_abort(self, session: Session, declared: Collection[str]) -> None:
        """Fail a session the application just opened if one of its peers aborted it first."""
        now = asyncio.get_running_loop().time()
        for peer in sorted(declared):
            early = self._early_aborts.pop((session.id, peer), None)
            if early is None or now - early[1] > self.config.unclaimed_timeout:
                continue
            if session.state is SessionState.OPEN:
                session._fail(
                    SessionClosed(
                        f"session {session.id!r} aborted by peer {peer!r} before it was"
                        " opened here",
                        reason=early[0],
                    ),
                    notify_except=peer,
                )

    def _adopt(self, adopted: list[Session]) -> tuple[Session, set[str]]:
        """One session out of the pending sessions of declared peers: the oldest takes in the
        others' channels. If any of them had failed (its peer broke the rules, or aborted),
        so has the result; returns it with the peers that already know."""
        session = adopted[0]
        told: set[str] = set()
        for pending in adopted:
            assert pending.opener is not None
            del self._pending[(pending.id, pending.opener)]
            if pending.state is not SessionState.OPEN:
                told.add(pending.opener)
                if session.state is SessionState.OPEN:
                    session.state, session.error = SessionState.FAILED, pending.error
            if pending is not session:
                session._absorb(pending)
                self._opened[pending.opener] -= 1  # one session now, counted once
        if session.state is not SessionState.OPEN:
            session._release()
        return session, told

    async def accept(self) -> Session:
        """Wait for a session a peer opened and nobody here claimed yet, and claim it (as
        that peer's session: the oldest whose id is free here)."""
        while True:
            for pending in self._pending.values():
                if pending.id not in self._sessions:
                    return self._claim(pending)
            if self._closed:
                raise SessionClosed("node closed")
            self._incoming.clear()
            await self._incoming.wait()

    def _claim(self, pending: Session) -> Session:
        assert pending.opener is not None
        del self._pending[(pending.id, pending.opener)]
        pending.claimed = True
        self._sessions[pending.id] = pending
        return pending

    # -- the links' side ----------------------------------------------------------------------

    def dispatch(self, peer: str, frames: list[Frame], batched: bool) -> None:
        """Act on the frames of one transport message from ``peer`` (a link's frame sink)."""
        for frame in frames:
            if isinstance(frame, Data):
                self._on_data(peer, frame, batched)
                continue
            if isinstance(frame, Credit | Close | Abort):
                session = self._sessions.get(frame.session)
                if session is None or peer not in session._peers:
                    session = self._pending.get((frame.session, peer))
                    if session is None:
                        if isinstance(frame, Abort):
                            self._remember_abort(frame.session, peer, frame.reason)
                        continue  # ended here already, or not the peer's: nothing to do
                if isinstance(frame, Credit):
                    ch = session._channels.get((peer, frame.channel))
                    if ch is not None:
                        ch.feed_credit(frame.allowed)
                elif isinstance(frame, Close):
                    session._peer_left(peer)
                else:
                    session._fail(
                        SessionClosed(
                            f"session {frame.session!r} aborted by peer {peer!r}",
                            reason=frame.reason,
                        ),
                        notify_except=peer,
                    )

    def _on_data(self, peer: str, frame: Data, batched: bool) -> None:
        sid = frame.session
        session = self._sessions.get(sid)
        if session is None or peer not in session._peers:
            session = self._pending.get((sid, peer)) or self._admit(peer, sid)
            if session is None:
                return
        if session.state is not SessionState.OPEN:
            return
        if peer in session._peer_closed:
            session._fail(
                RemoteProtocolError(f"sent data after closing session {sid!r}", peer=peer)
            )
            return
        ch = session._channels.get((peer, frame.channel))
        if ch is None:
            if len(session._channels) >= self.config.max_channels_per_session:
                session._fail(
                    RemoteProtocolError(
                        f"opened more than {self.config.max_channels_per_session} channels"
                        f" in session {sid!r}",
                        peer=peer,
                    )
                )
                return
            ch = session._new_channel(peer, frame.channel)
        try:
            ch.feed_data(frame, batched)
        except RemoteProtocolError as exc:
            session._fail(exc)

    def _admit(self, peer: str, sid: str) -> Session | None:
        """The pending session for the first frame ``peer`` sends for ``sid``, or ``None``:
        late (the session ended here) or refused (an ABORT tells the peer why)."""
        if (sid, peer) in self._ended:
            return None  # late frames of a session that ended here
        claimed = self._sessions.get(sid)
        if self._refusing:
            reason = "node is shutting down"
        elif claimed is not None and claimed._declared:
            reason = "not a member of this session"
        elif self.session_count >= self.config.max_sessions:
            reason = "too many concurrent sessions"
        elif self._opened[peer] >= self.config.max_sessions_per_peer:
            reason = f"too many concurrent sessions from {peer!r}"
        else:
            session = Session(self, sid, (peer,), claimed=False, opener=peer)
            self._pending[(sid, peer)] = session
            self._opened[peer] += 1
            self._incoming.set()
            return session
        self._reject(peer, sid, reason)
        return None

    def _reject(self, peer: str, sid: str, reason: str) -> None:
        """Refuse session ``sid`` to ``peer`` (once): an ABORT tells it why."""
        logger.warning("%s: rejecting session %r from %r: %s", self.party_id, sid, peer, reason)
        self._remember_ended(sid, peer)
        link = self.links[peer]
        seq = link.alloc_seq()
        link.push(seq, (abort_frame(seq, encode_name(sid), reason),), None)

    def _refuse(self, pending: Session, reason: str) -> None:
        """Refuse a pending session to the one peer whose it is: free it, ABORT to that peer."""
        assert pending.opener is not None
        logger.warning(
            "%s: rejecting session %r from %r: %s",
            self.party_id,
            pending.id,
            pending.opener,
            reason,
        )
        if pending.state is SessionState.OPEN:
            pending.state = SessionState.FAILED
            pending.error = SessionClosed(f"session {pending.id!r} refused", reason=reason)
            pending._tell_failed([pending.opener], reason)
        pending._release()
        self._forget(pending)

    def peer_reset(self, peer: str, reason: str) -> None:
        """``peer`` restarted and lost its state: end every session it is in; keep no id as
        ended for it, nor its old ABORTs (its new process may reopen them to resume its work)."""
        for session in self._all():
            if peer in session._peers:
                session._reset.add(peer)
                session._fail(PeerDisconnected(peer, reason, restarted=True), notify_except=peer)
        for table in (self._ended, self._early_aborts):
            for key in [k for k in table if k[1] == peer]:
                del table[key]

    def wake(self, peer: str) -> None:
        """The link to ``peer`` came up or went down: let its channels look again."""
        for session in self._sessions.values():
            if peer in session._peers:
                session._wake_peer(peer)

    # -- the node's side: time and lifecycle --------------------------------------------------

    def unclaimed(self) -> list[Session]:
        """Pending sessions (one peer's frames each, not claimed yet), oldest first."""
        return list(self._pending.values())

    def waiting_on(self, absent: Collection[str]) -> list[tuple[Session, list[str]]]:
        """Each open session with the ``absent`` peers (sorted) that are still in it."""
        waiting = []
        for session in self._all():
            if session.state is SessionState.OPEN:
                members = sorted(p for p in session._peers - session._peer_closed if p in absent)
                if members:
                    waiting.append((session, members))
        return waiting

    def fail(self, session: Session, error: P2PBoostError, *, notify_except: str) -> None:
        """End ``session`` on ``error``, telling every peer but ``notify_except`` why."""
        session._fail(error, notify_except=notify_except)

    async def close_all(self) -> None:
        """The node is closing: refuse new sessions, close every one (peers learn at once)."""
        self._refusing = True
        for session in self._all():
            await session.close()

    def shutdown(self) -> None:
        """The node closed: end what peers opened meanwhile, and wake ``accept()``."""
        self._closed = True
        for session in self._all():
            session.state = SessionState.CLOSED
            session._release()
        self._sessions.clear()
        self._pending.clear()
        self._incoming.set()

    def _all(self) -> list[Session]:
        return [*self._sessions.values(), *self._pending.values()]

    def _forget(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            self._incoming.set()  # the id is free: another peer's pending session may go
        elif (
            session.opener is not None
            and self._pending.get((session.id, session.opener)) is session
        ):
            del self._pending[(session.id, session.opener)]
        else:
            return  # forgotten already (a session closed twice after the node's shutdown)
        if session.opener is not None:
            self._opened[session.opener] -= 1
        for (peer, _), ch in session._channels.items():
            self._ended_sent[peer] += ch.messages_sent
            self._ended_received[peer] += ch.messages_received
        for peer in session._peers - session._reset:
            self._remember_ended(session.id, peer)

    def _remember_ended(self, sid: str, peer: str) -> None:
        self._ended[(sid, peer)] = None
        while len(self._ended) > 4 * self.config.max_sessions:
            self._ended.popitem(last=False)

    # -- statistics ---------------------------------------------------------------------------

    @property
    def session_count(self) -> int:
        """Sessions held here: claimed ones, and pending ones (one per peer and id)."""
        return len(self._sessions) + len(self._pending)

    def peer_counters(self) -> dict[str, tuple[int, int, int]]:
        """Per peer: bytes buffered on its channels, messages sent and received (all sessions)."""
        buffered, sent = dict.fromkeys(self._known, 0), dict(self._ended_sent)
        received = dict(self._ended_received)
        for session in self._all():
            for (peer, _), ch in session._channels.items():
                buffered[peer] += ch.buffered_bytes
                sent[peer] += ch.messages_sent
                received[peer] += ch.messages_received
        return {peer: (buffered[peer], sent[peer], received[peer]) for peer in self._known}
