"""Sessions, and the multiplexer that owns them: admission, frame dispatch, limits.

A :class:`Session` groups the channels (:mod:`p2pboost.net._channel`) of one protocol run (one
training, one batch of predictions) with a fixed set of peers. Many sessions share one link
per peer; the :class:`Mux` is what sits between the links and the sessions:

* it **dispatches** every frame a link delivers to the session and channel it names, creating
  channels (and sessions a peer opens) on demand, within ``max_sessions``,
  ``max_sessions_per_peer`` and ``max_channels_per_session``;
* it **refuses** what a peer may not do (a frame for a session it is not part of, a session
  beyond the limits) with an ABORT to that peer alone, and remembers recently ended sessions
  so that their late frames are dropped rather than taken for new ones;
* it **opens and claims** sessions for the application (``Node.session`` and
  ``Node.accept_session`` delegate here).

The node (:mod:`p2pboost.net.node`) owns everything about time and connections: it tells the
multiplexer when a peer restarted, when a link changed state, which sessions waited too long
(:meth:`Mux.unclaimed`, :meth:`Mux.waiting_on`, :meth:`Mux.fail`), and when to close. The
multiplexer never imports the node: it gets the configuration, the known peers and the links
in its constructor.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
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


class Session:
    """One protocol run with a fixed set of peers. Create with :meth:`Node.session`.

    Use it as an async context manager: leaving it closes the session (peers see
    :class:`SessionClosed` once they have read what was sent before).
    """

    def __init__(self, mux: Mux, session_id: str, peers: Iterable[str], *, claimed: bool):
        self._sid = encode_name(session_id)  # first: a bad id raises ValueError
        self.id = session_id
        self._mux = mux
        self._peers = set(peers)
        self.claimed = claimed
        #: The peer whose frame opened this session here (``None``: opened locally).
        self.opener: str | None = None
        self.state = SessionState.OPEN
        self.error: P2PBoostError | None = None
        self._channels: dict[tuple[str, str], Channel] = {}
        self._peer_closed: set[str] = set()
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

    async def abort(self, reason: str = "aborted") -> None:
        """End the session on an error: peers get :class:`SessionClosed` carrying ``reason``
        at once (unread data is dropped on both sides). Idempotent; then closes it."""
        self._fail(
            SessionClosed(f"session {self.id!r} aborted locally", reason=reason),
            wire_reason=reason,
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
    ) -> None:
        """End the session on ``error``: wake everyone, free buffers, tell the peers why
        (``wire_reason``, default ``str(error)``: our own diagnosis of a peer's fault)."""
        if self.state is not SessionState.OPEN:
            return
        self.state = SessionState.FAILED
        self.error = error
        logger.warning("%s: session %r failed: %s", self._mux.party_id, self.id, error)
        reason = str(error) if wire_reason is None else wire_reason
        for peer in sorted(self._peers):
            link = self._mux.links[peer]
            link.withdraw(self.id)
            if peer != notify_except and peer not in self._peer_closed:
                seq = link.alloc_seq()
                link.push(seq, (abort_frame(seq, self._sid, reason),), None)
        self._release()

    def _release(self) -> None:
        for ch in self._channels.values():
            ch.release()

    def _peer_left(self, peer: str) -> None:
        self._peer_closed.add(peer)
        for (p, _), ch in self._channels.items():
            if p == peer:
                ch.feed_eof()

    def _wake_peer(self, peer: str) -> None:
        for (p, _), ch in self._channels.items():
            if p == peer:
                ch.wake()


class Mux:
    """The sessions of one node and the dispatch of every frame its links deliver.

    ``peers`` are the party ids the node knows, ``links`` its link per peer (filled when the
    node starts; shared, not copied).
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
        self._sessions: dict[str, Session] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()  # recently ended session ids
        self._incoming: deque[Session] = deque()
        self._incoming_event = asyncio.Event()
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
        """Open session ``session_id`` with ``peers``, or claim it if a peer opened it first
        (see :meth:`Node.session <p2pboost.net.node.Node.session>`)."""
        existing = self._sessions.get(session_id)
        if existing is not None:
            if existing.claimed:
                raise LocalProtocolError(f"session {session_id!r} is already open")
            existing.claimed = True
            if peers is not None:
                declared = self.check_peers(peers)
                intruders = existing._peers - declared
                existing._peers |= declared
                if intruders:
                    intruder = sorted(intruders)[0]
                    existing._fail(
                        RemoteProtocolError(
                            f"sent frames for session {session_id!r}, which it is not part of",
                            peer=intruder,
                        )
                    )
            return existing
        if peers is None:
            raise InputError(f"session {session_id!r} is new: give its peers")
        declared = self.check_peers(peers)
        if len(self._sessions) >= self.config.max_sessions:
            raise LocalProtocolError(
                f"too many concurrent sessions (max_sessions={self.config.max_sessions})"
            )
        try:
            session = Session(self, session_id, declared, claimed=True)
        except ValueError as exc:
            raise InputError(f"bad session id {session_id!r}: {exc}") from exc
        self._ended.pop(session_id, None)
        self._sessions[session_id] = session
        return session

    async def accept(self) -> Session:
        """Wait for a session a peer opened and nobody here claimed yet, and claim it."""
        while True:
            while self._incoming:
                session = self._incoming.popleft()
                if not session.claimed and self._sessions.get(session.id) is session:
                    session.claimed = True
                    return session
            if self._closed:
                raise SessionClosed("node closed")
            self._incoming_event.clear()
            await self._incoming_event.wait()

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
                    continue  # ended here already, or a stranger's: nothing to do
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
        if session is None:
            if sid in self._ended:
                return  # late frames of a session that ended here
            if self._refusing:
                self._reject(peer, sid, "node is shutting down")
                return
            if len(self._sessions) >= self.config.max_sessions:
                self._reject(peer, sid, "too many concurrent sessions")
                return
            opened = sum(1 for s in self._sessions.values() if s.opener == peer)
            if opened >= self.config.max_sessions_per_peer:
                self._reject(peer, sid, f"too many concurrent sessions from {peer!r}")
                return
            session = Session(self, sid, (peer,), claimed=False)
            session.opener = peer
            self._sessions[sid] = session
            self._incoming.append(session)
            self._incoming_event.set()
        elif peer not in session._peers:
            if session.claimed:
                self._reject(peer, sid, "not a member of this session")
                return
            session._peers.add(peer)
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

    def _reject(self, peer: str, sid: str, reason: str) -> None:
        """Refuse session ``sid`` to ``peer`` (once): an ABORT tells it why."""
        logger.warning("%s: rejecting session %r from %r: %s", self.party_id, sid, peer, reason)
        self._ended[sid] = None
        link = self.links[peer]
        seq = link.alloc_seq()
        link.push(seq, (abort_frame(seq, encode_name(sid), reason),), None)

    def peer_reset(self, peer: str, reason: str) -> None:
        """``peer`` restarted and lost its state: end every session it is in."""
        for session in list(self._sessions.values()):
            if peer in session._peers:
                session._fail(PeerDisconnected(peer, reason), notify_except=peer)

    def wake(self, peer: str) -> None:
        """The link to ``peer`` came up or went down: let its channels look again."""
        for session in self._sessions.values():
            if peer in session._peers:
                session._wake_peer(peer)

    # -- the node's side: time and lifecycle --------------------------------------------------

    def unclaimed(self) -> list[Session]:
        """Sessions peers opened that the application has not claimed (oldest first)."""
        return [s for s in self._sessions.values() if not s.claimed]

    def waiting_on(self, absent: Collection[str]) -> list[tuple[Session, list[str]]]:
        """Each open session with the ``absent`` peers (sorted) that are still in it."""
        waiting = []
        for session in self._sessions.values():
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
        for session in list(self._sessions.values()):
            await session.close()

    def shutdown(self) -> None:
        """The node closed: end what peers opened meanwhile, and wake ``accept()``."""
        self._closed = True
        for session in self._sessions.values():
            session.state = SessionState.CLOSED
            session._release()
        self._sessions.clear()
        self._incoming_event.set()

    def _forget(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        for (peer, _), ch in session._channels.items():
            self._ended_sent[peer] += ch.messages_sent
            self._ended_received[peer] += ch.messages_received
        self._ended[session.id] = None
        while len(self._ended) > 4 * self.config.max_sessions:
            self._ended.popitem(last=False)

    # -- statistics ---------------------------------------------------------------------------

    @property
    def session_count(self) -> int:
        """Sessions held here, claimed or not."""
        return len(self._sessions)

    def peer_counters(self) -> dict[str, tuple[int, int, int]]:
        """Per peer: bytes buffered on its channels, messages sent to it and received from it
        (ended sessions included)."""
        buffered = dict.fromkeys(self._known, 0)
        sent = dict(self._ended_sent)
        received = dict(self._ended_received)
        for session in self._sessions.values():
            for (peer, _), ch in session._channels.items():
                buffered[peer] += ch.buffered_bytes
                sent[peer] += ch.messages_sent
                received[peer] += ch.messages_received
        return {peer: (buffered[peer], sent[peer], received[peer]) for peer in self._known}
