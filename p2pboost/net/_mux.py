"""The multiplexer that holds a node's sessions: admission, frame dispatch, limits.

A :class:`~p2pboost.net._session.Session` groups the channels (:mod:`p2pboost.net._channel`)
of one protocol run (one training, one batch of predictions) with a fixed set of peers. Many
sessions share one link per peer; the :class:`Mux` is what sits between the links and the
sessions:

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

The multiplexer never moves a session's state: it tells the session what happened (a peer's
CLOSE, an ABORT, a claim, a restart) through the session's methods, and the session's own
transition tables (:mod:`p2pboost.net._states`) decide, raising
:class:`~p2pboost.exceptions.LocalProtocolError` for a move they do not have.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterable, Mapping

from p2pboost.exceptions import (
    InputError,
    LocalProtocolError,
    P2PBoostError,
    PeerDisconnected,
    RemoteProtocolError,
    SessionClosed,
)
from p2pboost.net._frames import Abort, Close, Credit, Data, Frame, abort_frame, encode_name
from p2pboost.net._link import Link
from p2pboost.net._session import STOPPED, Session
from p2pboost.net._states import SessionState
from p2pboost.net.config import NodeConfig

__all__ = ["STOPPED", "Mux", "Session"]

logger = logging.getLogger("p2pboost.net.node")


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
            session.declare(declared)
        else:
            try:
                session = Session(self, session_id, declared)  # declared from the start
            except ValueError as exc:
                raise InputError(f"bad session id {session_id!r}: {exc}") from exc
        for stranger in strangers:
            self._refuse(stranger, "not a member of this session")
        for peer in declared:
            self._ended.pop((session_id, peer), None)
        self._sessions[session_id] = session
        if session.state is not SessionState.OPEN:  # a peer broke the rules before the claim
            session.tell_failed(sorted(declared - told), str(session.error))
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
                session.fail(
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
        so has the result; returns it with the peers that already know (the caller tells the
        others, once the claim has declared who they are)."""
        session = adopted[0]
        told: set[str] = set()
        for pending in adopted:
            assert pending.opener is not None
            del self._pending[(pending.id, pending.opener)]
            if pending.state is not SessionState.OPEN:
                told.add(pending.opener)
                if pending.error is not None:
                    session.fail(pending.error, level=None, tell=False)  # logged when it failed
            if pending is not session:
                session.absorb(pending)
                self._opened[pending.opener] -= 1  # one session now, counted once
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
        pending.accept()
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
                if session is None or not session.is_member(peer):
                    session = self._pending.get((frame.session, peer))
                    if session is None:
                        if isinstance(frame, Abort):
                            self._remember_abort(frame.session, peer, frame.reason)
                        continue  # ended here already, or not the peer's: nothing to do
                if isinstance(frame, Credit):
                    ch = session.find_channel(peer, frame.channel)
                    if ch is not None:
                        ch.feed_credit(frame.allowed)
                elif isinstance(frame, Close):
                    session.peer_left(peer)
                else:
                    session.fail(
                        SessionClosed(
                            f"session {frame.session!r} aborted by peer {peer!r}",
                            reason=frame.reason,
                        ),
                        notify_except=peer,
                    )

    def _on_data(self, peer: str, frame: Data, batched: bool) -> None:
        sid = frame.session
        session = self._sessions.get(sid)
        if session is None or not session.open_to(peer):  # the common case skips all of this
            if session is None or not session.is_member(peer):
                session = self._pending.get((sid, peer)) or self._admit(peer, sid)
                if session is None:
                    return
            if session.state is not SessionState.OPEN:
                return
            if session.has_left(peer):
                session.fail(
                    RemoteProtocolError(f"sent data after closing session {sid!r}", peer=peer)
                )
                return
        ch = session.find_channel(peer, frame.channel)
        if ch is None:
            if session.channel_count >= self.config.max_channels_per_session:
                session.fail(
                    RemoteProtocolError(
                        f"opened more than {self.config.max_channels_per_session} channels"
                        f" in session {sid!r}",
                        peer=peer,
                    )
                )
                return
            ch = session.add_channel(peer, frame.channel)
        try:
            ch.feed_data(frame, batched)
        except RemoteProtocolError as exc:
            session.fail(exc)

    def _admit(self, peer: str, sid: str) -> Session | None:
        """The pending session for the first frame ``peer`` sends for ``sid``, or ``None``:
        late (the session ended here) or refused (an ABORT tells the peer why)."""
        if (sid, peer) in self._ended:
            return None  # late frames of a session that ended here
        claimed = self._sessions.get(sid)
        if self._refusing:
            reason = "node is shutting down"
        elif claimed is not None and claimed.declared:
            reason = "not a member of this session"
        elif self.session_count >= self.config.max_sessions:
            reason = "too many concurrent sessions"
        elif self._opened[peer] >= self.config.max_sessions_per_peer:
            reason = f"too many concurrent sessions from {peer!r}"
        else:
            session = Session(self, sid, (peer,), opener=peer)
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
        # Logged above; the one peer whose it is learns why (an ABORT), its buffers are freed.
        refused = SessionClosed(f"session {pending.id!r} refused", reason=reason)
        pending.fail(refused, wire_reason=reason, level=None)
        pending.release()
        self.forget(pending)

    def peer_reset(self, peer: str, reason: str) -> None:
        """``peer`` restarted and lost its state: end every session it is in; keep no id as
        ended for it, nor its old ABORTs (its new process may reopen them to resume its work)."""
        for session in self._all():
            if session.is_member(peer):
                session.peer_restarted(peer)
                session.fail(PeerDisconnected(peer, reason, restarted=True), notify_except=peer)
        for table in (self._ended, self._early_aborts):
            for key in [k for k in table if k[1] == peer]:
                del table[key]

    def wake(self, peer: str) -> None:
        """The link to ``peer`` came up or went down: let its channels look again."""
        for session in self._sessions.values():
            if session.is_member(peer):
                session.wake(peer)

    # -- the node's side: time and lifecycle --------------------------------------------------

    def unclaimed(self) -> list[Session]:
        """Pending sessions (one peer's frames each, not claimed yet), oldest first."""
        return list(self._pending.values())

    def waiting_on(self, absent: Collection[str]) -> list[tuple[Session, list[str]]]:
        """Each open session with the ``absent`` peers (sorted) that are still in it."""
        waiting = []
        for session in self._all():
            if session.state is SessionState.OPEN:
                members = [p for p in session.present() if p in absent]
                if members:
                    waiting.append((session, members))
        return waiting

    def fail(self, session: Session, error: P2PBoostError, *, notify_except: str) -> None:
        """End ``session`` on ``error``, telling every peer but ``notify_except`` why."""
        session.fail(error, notify_except=notify_except)

    async def close_all(self) -> None:
        """The node is closing: refuse new sessions, close every one (peers learn at once)."""
        self._refusing = True
        for session in self._all():
            await session.close()

    def shutdown(self) -> None:
        """The node closed: end what peers opened meanwhile, and wake ``accept()``."""
        self._closed = True
        for session in self._all():
            session.drop()
        self._sessions.clear()
        self._pending.clear()
        self._incoming.set()

    def _all(self) -> list[Session]:
        return [*self._sessions.values(), *self._pending.values()]

    def forget(self, session: Session) -> None:
        """``session`` ended (closed, or refused): free its id, keep its channels' counts, and
        remember it as ended for its peers so that their late frames are dropped."""
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
        for peer, ch in session.channels():
            self._ended_sent[peer] += ch.messages_sent
            self._ended_received[peer] += ch.messages_received
        for peer in session.ended_for():
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
            for peer, ch in session.channels():
                buffered[peer] += ch.buffered_bytes
                sent[peer] += ch.messages_sent
                received[peer] += ch.messages_received
        return {peer: (buffered[peer], sent[peer], received[peer]) for peer in self._known}
