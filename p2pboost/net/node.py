"""The async party node: one reliable link per peer, sessions and channels multiplexed on it.

::

    async with Node("guest", peers={"host": "wss://10.0.0.2:8443"}, tls="certs/guest") as node:
        async with node.session("train-42", peers=["host"]) as session:
            ch = session.channel("host", "gradients")
            await ch.send({"round": 1})
            reply = await ch.recv()

The node owns I/O and time: it dials or accepts one connection per peer (the party whose id
sorts first dials, the other accepts), re-dials with capped, jittered exponential back-off,
sends heart-beats and drops a silent connection, and resends whatever the peer had not
acknowledged once a new connection is up (see :mod:`p2pboost.net._link`). A peer that stays away
longer than ``reconnect_timeout`` ends the sessions it is in with
:class:`~p2pboost.exceptions.PeerDisconnected`; every other session goes on.

Every frame from a peer is validated. A frame that breaks a session's rules (beyond credit,
oversized, undecodable, unknown stream state) ends *that* session with
:class:`~p2pboost.exceptions.RemoteProtocolError` naming the peer, and the peers of the session
are told (an ABORT frame). Bytes that do not even parse as frames reset the connection (then
the link resumes). Neither ever ends the node.

All background tasks belong to the node: leaving ``async with`` flushes what is unacknowledged
(up to ``close_timeout``), then cancels and awaits every task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections import OrderedDict, deque
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from p2pboost.codec import DEFAULT_LIMITS, Limits
from p2pboost.exceptions import (
    ConfigError,
    InputError,
    LocalProtocolError,
    PeerDisconnected,
    RemoteProtocolError,
    SessionClosed,
)
from p2pboost.exceptions import TransportError as P2PBoostTransportError
from p2pboost.net._frames import Abort, Close, Credit, Data, Frame, abort_frame, encode_name
from p2pboost.net._link import Link, LinkSettings
from p2pboost.net._mux import Channel, Session, SessionState, StreamWriter
from p2pboost.net.transport import load_tls, translate_error, websocket_transport
from transports.base import Connection, Listener, Transport
from transports.errors import TransportConfigError, TransportError

if TYPE_CHECKING:
    from p2pboost.certs import TLSConfig

__all__ = [
    "Channel",
    "Node",
    "NodeConfig",
    "NodeStats",
    "PeerStats",
    "Session",
    "SessionState",
    "StreamWriter",
]

logger = logging.getLogger("p2pboost.net.node")

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Limits and timeouts of a node (seconds, bytes). Both sides should use the same values.

    Memory one peer can make this node hold is bounded by, per channel, ``window`` (plus, on
    a channel where the application waits for a message larger than the window, that message,
    at most ``max_message_bytes``), times ``max_channels_per_session``, times the sessions it
    is in (those it opens here: at most ``max_sessions_per_peer``). The resend buffer is
    bounded by the peers' windows the same way. Lower these for peers you trust less;
    ``Node.stats().buffered_bytes`` shows what is held.
    """

    #: Per-channel receive window (credit granted to the peer before it must wait).
    window: int = 8 * MiB
    #: Largest DATA payload per frame; larger messages are split and reassembled. A little
    #: over 1 MiB so that a 1 MiB array and its encoding header travel as one frame.
    max_fragment: int = 1 * MiB + 64 * KiB
    #: Largest message (encoded) a channel sends or accepts.
    max_message_bytes: int = 256 * MiB
    #: Small frames are coalesced into one transport message up to this size.
    coalesce_bytes: int = 64 * KiB
    max_sessions: int = 1024
    #: Sessions one peer may open here (so one peer cannot take every slot).
    max_sessions_per_peer: int = 256
    max_channels_per_session: int = 64
    #: A session a peer opened that the application neither claimed (``session`` or
    #: ``accept_session``) nor saw end within this time is aborted, freeing its slot.
    unclaimed_timeout: float = 300.0
    #: Send an (empty) message after this much silence...
    heartbeat_interval: float = 5.0
    #: ...and drop a connection on which nothing arrived for this long.
    heartbeat_timeout: float = 20.0
    #: A peer away for longer than this ends its sessions with PeerDisconnected.
    reconnect_timeout: float = 60.0
    #: Bound on one dial attempt (TCP + TLS + identity check).
    connect_timeout: float = 10.0
    #: Re-dial back-off: starts here, doubles, capped at ``backoff_max``, jittered.
    backoff_initial: float = 0.05
    backoff_max: float = 5.0
    #: A stand-alone ack goes out after this delay if nothing else carried it (acks only
    #: free the peer's resend buffer; credit, which paces the peer, is separate).
    ack_delay: float = 0.02
    #: On exit, wait this long for peers to acknowledge what was sent.
    close_timeout: float = 5.0
    codec_limits: Limits = field(default=DEFAULT_LIMITS)

    def __post_init__(self) -> None:
        positive = {
            "window": self.window,
            "max_fragment": self.max_fragment,
            "max_message_bytes": self.max_message_bytes,
            "coalesce_bytes": self.coalesce_bytes,
            "max_sessions": self.max_sessions,
            "max_sessions_per_peer": self.max_sessions_per_peer,
            "max_channels_per_session": self.max_channels_per_session,
            "unclaimed_timeout": self.unclaimed_timeout,
            "heartbeat_interval": self.heartbeat_interval,
            "heartbeat_timeout": self.heartbeat_timeout,
            "reconnect_timeout": self.reconnect_timeout,
            "connect_timeout": self.connect_timeout,
            "backoff_initial": self.backoff_initial,
            "backoff_max": self.backoff_max,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"NodeConfig.{name} must be > 0, got {value!r}")
        if self.ack_delay < 0 or self.close_timeout < 0:
            raise ConfigError("NodeConfig.ack_delay and close_timeout must be >= 0")
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigError("heartbeat_timeout must exceed heartbeat_interval")
        if self.window < 2 * 64:
            raise ConfigError("window must be at least 128 bytes")


@dataclass(frozen=True, slots=True)
class PeerStats:
    """Counters of the link to one peer (bytes include framing; messages are app messages)."""

    peer: str
    connected: bool
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    wire_messages_sent: int
    wire_messages_received: int
    connections: int
    dial_attempts: int
    link_errors: int
    resend_buffer_bytes: int
    receive_buffer_bytes: int


@dataclass(frozen=True, slots=True)
class NodeStats:
    """A snapshot of the node's counters; ``buffered_bytes`` is what the memory bound covers."""

    party_id: str
    sessions: int
    buffered_bytes: int
    peers: Mapping[str, PeerStats]


class Node:
    """One party of the federation. Use as ``async with Node(...) as node``.

    ``peers`` maps every other party id to its address; the address may be ``None`` for a peer
    whose id sorts before ours (it dials us, we never dial it). ``listen`` is required when any
    peer sorts before us. ``transport`` defaults to the WebSocket + mutual TLS transport built
    from ``tls`` (see :mod:`transports.websocket` and :mod:`p2pboost.certs`).
    """

    def __init__(
        self,
        party_id: str,
        *,
        listen: str | None = None,
        peers: Mapping[str, str | None],
        tls: TLSConfig | str | os.PathLike[str] | None = None,
        transport: Transport | None = None,
        config: NodeConfig | None = None,
    ) -> None:
        try:
            encode_name(party_id)
        except ValueError as exc:
            raise ConfigError(f"bad party id {party_id!r}: {exc}") from exc
        if party_id in peers:
            raise ConfigError(f"party {party_id!r} lists itself among its peers")
        for peer, address in peers.items():
            try:
                encode_name(peer)
            except ValueError as exc:
                raise ConfigError(f"bad peer id {peer!r}: {exc}") from exc
            if peer > party_id and address is None:
                raise ConfigError(
                    f"{party_id!r} dials {peer!r} (the smaller id dials) but has no address"
                )
        if listen is None and any(peer < party_id for peer in peers):
            raise ConfigError(f"{party_id!r} must listen: peers with smaller ids dial it")
        if transport is None and tls is None:
            raise ConfigError("give either a transport or a TLS configuration")
        self.party_id = party_id
        self.listen = listen
        self.peers: Mapping[str, str | None] = MappingProxyType(dict(peers))
        self.config = config or NodeConfig()
        self._tls = tls
        self._tls_config: TLSConfig | None = None  # resolved when we build the transport
        self._transport = transport
        self._links: dict[str, Link] = {}
        self._sessions: dict[str, Session] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()  # recently ended session ids
        self._incoming: deque[Session] = deque()
        self._incoming_event: asyncio.Event | None = None
        self._connected_events: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listener: Listener | None = None
        self._running = False
        self._close_started = False
        self._closing = False  # set once flushing is over: from then on nothing new is accepted

    def __repr__(self) -> str:
        return f"<Node {self.party_id!r} peers={sorted(self.peers)}>"

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def address(self) -> str | None:
        """Where the node actually listens (port 0 resolved), once started."""
        return None if self._listener is None else self._listener.address

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(flush=exc_type is None)

    async def start(self) -> None:
        """Listen, start dialing and the watchdog (``async with`` calls this)."""
        if self._running:
            raise LocalProtocolError("node already started")
        self._running = True
        if self._transport is None:
            self._transport = self._websocket_transport()
        c = self.config
        settings = LinkSettings(
            window=c.window,
            max_fragment=c.max_fragment,
            coalesce_bytes=c.coalesce_bytes,
            ack_delay=c.ack_delay,
            heartbeat_interval=c.heartbeat_interval,
            heartbeat_timeout=c.heartbeat_timeout,
            connect_timeout=c.connect_timeout,
            backoff_initial=c.backoff_initial,
            backoff_max=c.backoff_max,
        )
        epoch = secrets.randbits(63) | 1  # never 0
        self._incoming_event = asyncio.Event()
        for peer, address in self.peers.items():
            dial = address if peer > self.party_id else None
            self._links[peer] = Link(
                self, self.party_id, peer, epoch, settings, dial, explain=self._explain
            )
        try:
            if self.listen is not None:
                self._listener = await self._serve(self._transport, self.listen)
            for link in self._links.values():
                if link.dial_address is not None:
                    self._spawn(link.dial_forever(self._transport, self._spawn))
            self._spawn(self._watchdog())
        except BaseException:
            await self.close(flush=False)
            raise

    async def close(self, *, flush: bool = True) -> None:
        """Stop: flush unacknowledged frames (up to ``close_timeout``), end every session,
        close the listener and connections, cancel and await every task. Idempotent."""
        if self._close_started:
            return
        self._close_started = True
        for session in list(self._sessions.values()):
            await session.close()  # peers learn at once instead of after reconnect_timeout
        if flush:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.config.close_timeout
            # Wait for acks only from peers still connected (one that left cannot ack).
            while not all(link.drained or not link.connected for link in self._links.values()):
                if loop.time() >= deadline:
                    logger.warning("%s: closing with unacknowledged frames", self.party_id)
                    break
                await asyncio.sleep(0.005)
        self._closing = True
        for session in list(self._sessions.values()):  # opened by peers while flushing
            session.state = SessionState.CLOSED
            for ch in session._channels.values():
                ch._release()
        self._sessions.clear()
        if self._incoming_event is not None:
            self._incoming_event.set()
        for link in self._links.values():
            link.closing = True
            link.kill("node closing")
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        # Cancel what is running (dialers, watchdog, readers); let the connection closers run
        # to completion for a moment so the peers see a clean close.
        closers = {t for t in self._tasks if t.get_name().startswith("p2pboost-close")}
        for task in self._tasks - closers:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        for task in self._tasks:
            task.cancel()
        while self._tasks:
            await asyncio.wait(self._tasks)

    async def _serve(self, transport: Transport, address: str) -> Listener:
        """Listen at ``address``; the transport's errors become p2pboost's."""
        try:
            return await transport.serve(address, self._accept)
        except TransportError as exc:
            raise self._explain(exc) from None
        except TransportConfigError as exc:
            raise ConfigError(f"cannot listen on {address!r}: {exc}") from None

    def _explain(self, exc: TransportError) -> P2PBoostTransportError:
        return translate_error(exc, tls=self._tls_config)

    def _websocket_transport(self) -> Transport:
        """The default transport: WebSockets with mutual TLS, built from ``tls``.

        ``tls`` is a :class:`~p2pboost.certs.TLSConfig` or the directory ``p2pboost certs
        init`` wrote for this party. WebSocket pings are off (the node sends its own
        heart-beats) and the closing handshake is short (a dead peer must not hold up a
        reconnect or the node's exit).
        """
        assert self._tls is not None
        self._tls_config = load_tls(self._tls)
        c = self.config
        return websocket_transport(
            self._tls_config,
            party_id=self.party_id,
            allowed_peers=list(self.peers),
            max_message_bytes=max(64 * MiB, c.max_fragment + c.coalesce_bytes + 64 * KiB),
            open_timeout=c.connect_timeout,
            close_timeout=1.0,
            ping_interval=None,
        )

    def _spawn(
        self, coro: Coroutine[Any, Any, Any], *, name: str = "p2pboost-node"
    ) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s: background task failed", self.party_id, exc_info=task.exception())

    async def _accept(self, conn: Connection) -> None:
        link = self._links.get(conn.peer_id)
        if link is None or link.dial_address is not None or self._closing:
            logger.warning(
                "%s: refusing a connection from %r (unknown, or we dial it)",
                self.party_id,
                conn.peer_id,
            )
            await conn.close()
            return
        await link.run(conn, self._spawn)

    async def _watchdog(self) -> None:
        c = self.config
        tick = max(0.005, min(c.heartbeat_interval, c.reconnect_timeout / 4, 1.0))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            for link in self._links.values():
                if link.connected and now - link.last_recv > c.heartbeat_timeout:
                    link.kill(f"nothing received for {c.heartbeat_timeout} s")
            for session in list(self._sessions.values()):
                if not session.claimed and now - session.created_at > c.unclaimed_timeout:
                    await session.abort("not claimed by the application in time")
                    continue
                if session.state is not SessionState.OPEN:
                    continue
                for peer in sorted(session._peers - session._peer_closed):
                    link = self._links[peer]
                    if link.connected:
                        continue
                    away = now - max(link.away_since, session.created_at)
                    if away > c.reconnect_timeout:
                        session._fail(
                            PeerDisconnected(
                                peer,
                                f"peer {peer!r} unreachable for {away:.1f} s (reconnect_timeout"
                                f" {c.reconnect_timeout} s); session {session.id!r} ended",
                            ),
                            notify_except=peer,
                        )
                        break

    def is_connected(self, peer: str) -> bool:
        """Whether a connection to ``peer`` is up right now (it may drop at any moment)."""
        self._check_peers([peer])
        link = self._links.get(peer)
        return link is not None and link.connected

    async def wait_connected(self, peer: str) -> None:
        """Wait until a connection to ``peer`` is up (bound it with ``asyncio.timeout``).

        Lets a service fail fast while a peer is away instead of queueing work behind a
        re-dial: online serving checks this before sending a batch.
        """
        self._check_running()
        self._check_peers([peer])
        link = self._links[peer]
        if link.connected:
            return
        event = self._connected_events.get(peer)
        if event is None:
            event = self._connected_events[peer] = asyncio.Event()
        event.clear()
        while not link.connected:
            await event.wait()
            event.clear()

    # -- sessions -----------------------------------------------------------------------------

    def session(self, session_id: str, peers: Iterable[str] | None = None) -> Session:
        """Open session ``session_id`` with ``peers``, or claim it if a peer opened it first.

        Frames for a session may arrive before this call (the first one opens it on demand);
        they wait in the channels' windows. ``peers`` may be omitted only when claiming.
        """
        self._check_running()
        existing = self._sessions.get(session_id)
        if existing is not None:
            if existing.claimed:
                raise LocalProtocolError(f"session {session_id!r} is already open")
            existing.claimed = True
            if peers is not None:
                declared = self._check_peers(peers)
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
        declared = self._check_peers(peers)
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

    async def accept_session(self) -> Session:
        """Wait for a session a peer opened and nobody here claimed yet, and claim it.

        Bound the wait with ``asyncio.timeout`` / ``anyio.fail_after`` if needed.
        """
        self._check_running()
        assert self._incoming_event is not None
        while True:
            while self._incoming:
                session = self._incoming.popleft()
                if not session.claimed and self._sessions.get(session.id) is session:
                    session.claimed = True
                    return session
            if self._closing:
                raise SessionClosed("node closed")
            self._incoming_event.clear()
            await self._incoming_event.wait()

    def _check_running(self) -> None:
        if not self._running or self._close_started:
            raise LocalProtocolError("node is not running (use `async with Node(...)`)")

    def _check_peers(self, peers: Iterable[str]) -> set[str]:
        declared = set(peers)
        if not declared:
            raise InputError("a session needs at least one peer")
        unknown = declared - set(self.peers)
        if unknown:
            raise InputError(f"unknown peers {sorted(unknown)}; known: {sorted(self.peers)}")
        return declared

    def _forget_session(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        for (peer, _), ch in session._channels.items():
            link = self._links[peer]
            link.closed_messages_sent += ch.messages_sent
            link.closed_messages_received += ch.messages_received
        self._ended[session.id] = None
        while len(self._ended) > 4 * self.config.max_sessions:
            self._ended.popitem(last=False)

    # -- frames from links --------------------------------------------------------------------

    def _link_frames(self, link: Link, frames: list[Frame], batched: bool) -> None:
        peer = link.peer
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
                        ch._on_credit(frame.allowed)
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
            if self._close_started:
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
            assert self._incoming_event is not None
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
            ch = session._channels[(peer, frame.channel)] = Channel(session, peer, frame.channel)
        try:
            ch._on_data(frame, batched)
        except RemoteProtocolError as exc:
            session._fail(exc)

    def _reject(self, peer: str, sid: str, reason: str) -> None:
        """Refuse session ``sid`` to ``peer`` (once): an ABORT tells it why."""
        logger.warning("%s: rejecting session %r from %r: %s", self.party_id, sid, peer, reason)
        self._ended[sid] = None
        link = self._links[peer]
        seq = link.alloc_seq()
        link.push(seq, (abort_frame(seq, encode_name(sid), reason),), None)

    def _link_peer_reset(self, link: Link, reason: str) -> None:
        for session in list(self._sessions.values()):
            if link.peer in session._peers:
                session._fail(PeerDisconnected(link.peer, reason), notify_except=link.peer)

    def _link_state_changed(self, link: Link) -> None:
        event = self._connected_events.get(link.peer)
        if event is not None:
            if link.connected:
                event.set()
            else:
                event.clear()
        for session in self._sessions.values():
            if link.peer in session._peers:
                session._wake_peer(link.peer)

    # -- statistics ---------------------------------------------------------------------------

    def stats(self) -> NodeStats:
        """A snapshot of per-peer counters and of the bytes the node buffers."""
        received: dict[str, int] = dict.fromkeys(self._links, 0)
        sent_msgs: dict[str, int] = dict.fromkeys(self._links, 0)
        recv_msgs: dict[str, int] = dict.fromkeys(self._links, 0)
        for session in self._sessions.values():
            for (peer, _), ch in session._channels.items():
                received[peer] += ch.buffered_bytes
                sent_msgs[peer] += ch.messages_sent
                recv_msgs[peer] += ch.messages_received
        peers = {
            peer: PeerStats(
                peer=peer,
                connected=link.connected,
                bytes_sent=link.bytes_sent,
                bytes_received=link.bytes_received,
                messages_sent=sent_msgs[peer] + link.closed_messages_sent,
                messages_received=recv_msgs[peer] + link.closed_messages_received,
                wire_messages_sent=link.wire_messages_sent,
                wire_messages_received=link.wire_messages_received,
                connections=link.connections,
                dial_attempts=link.dial_attempts,
                link_errors=link.link_errors,
                resend_buffer_bytes=link.resend_bytes,
                receive_buffer_bytes=received[peer],
            )
            for peer, link in self._links.items()
        }
        buffered = sum(p.resend_buffer_bytes + p.receive_buffer_bytes for p in peers.values())
        return NodeStats(self.party_id, len(self._sessions), buffered, MappingProxyType(peers))
