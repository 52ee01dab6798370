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

Every frame from a peer is validated (by the session multiplexer, :mod:`p2pboost.net._mux`).
A frame that breaks a session's rules (beyond credit, oversized, undecodable, unknown stream
state) ends *that* session with :class:`~p2pboost.exceptions.RemoteProtocolError` naming the
peer, and the peers of the session are told (an ABORT frame). Bytes that do not even parse as
frames reset the connection (then the link resumes). Neither ever ends the node.

The node keeps to lifecycle, links, time and statistics; sessions, channels and the dispatch
of frames live in :mod:`p2pboost.net._mux` and :mod:`p2pboost.net._channel`, which never
import the node.

All background tasks belong to the node: leaving ``async with`` flushes what is unacknowledged
(up to ``close_timeout``), then cancels and awaits every task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Coroutine, Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from p2pboost.exceptions import (
    ConfigError,
    LocalProtocolError,
    PeerDisconnected,
    PeerUnreachable,
)
from p2pboost.exceptions import TransportError as P2PBoostTransportError
from p2pboost.net import _memory
from p2pboost.net._channel import Channel, StreamWriter
from p2pboost.net._frames import encode_name
from p2pboost.net._link import Link, LinkHooks, LinkSettings
from p2pboost.net._mux import Mux
from p2pboost.net._session import Session
from p2pboost.net._states import SessionState
from p2pboost.net.config import KiB, MiB, NodeConfig, NodeStats, PeerStats
from p2pboost.net.transport import load_tls, translate_error, websocket_transport
from p2pboost.transports.base import Connection, Listener, Transport
from p2pboost.transports.errors import TransportConfigError, TransportError

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

#: Fragments' worth of freed memory the C allocator keeps for reuse (see
#: :mod:`p2pboost.net._memory`): the copies below the node of one fragment on its way out and
#: in swing the heap by a few fragments; with eight, none of them faults fresh pages.
RETAINED_FRAGMENTS = 8


class Node:
    """One party of the federation. Use as ``async with Node(...) as node``.

    ``peers`` maps every other party id to its address; the address may be ``None`` for a peer
    whose id sorts before ours (it dials us, we never dial it). ``listen`` is required when any
    peer sorts before us. ``transport`` defaults to the WebSocket + mutual TLS transport built
    from ``tls`` (see :mod:`p2pboost.net.transport` and :mod:`p2pboost.certs`).
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
        self._mux = Mux(party_id, self.config, self.peers, self._links)
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
        _memory.retain_freed_buffers(RETAINED_FRAGMENTS * c.max_fragment)
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
        hooks = LinkHooks(
            deliver=self._mux.dispatch,
            state_changed=self._link_state_changed,
            peer_reset=self._link_peer_reset,
            explain=self._explain,
        )
        epoch = secrets.randbits(63) | 1  # never 0
        for peer, address in self.peers.items():
            dial = address if peer > self.party_id else None
            self._links[peer] = Link(hooks, self.party_id, peer, epoch, settings, dial)
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
        await self._mux.close_all()  # peers learn at once instead of after reconnect_timeout
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
        self._mux.shutdown()  # ends what peers opened while we flushed; wakes accept_session
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

    # -- the transport, and its errors --------------------------------------------------------

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

    async def _serve(self, transport: Transport, address: str) -> Listener:
        """Listen at ``address``; the transport's errors become p2pboost's."""
        try:
            return await transport.serve(address, self._accept)
        except TransportError as exc:
            raise self._explain(exc) from None
        except TransportConfigError as exc:
            raise ConfigError(f"cannot listen on {address!r}: {exc}") from None

    def _explain(self, exc: TransportError) -> P2PBoostTransportError:
        """p2pboost's exception for a transport's (with the check of our own certificate)."""
        return translate_error(exc, tls=self._tls_config)

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

    # -- time ---------------------------------------------------------------------------------

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
            for session in self._mux.unclaimed():
                if now - session.created_at > c.unclaimed_timeout:
                    await session.abort("not claimed by the application in time")
            refused = {p: link.fatal for p, link in self._links.items() if link.fatal is not None}
            if refused:
                self._end_refused(refused)
            absent = {p: link.away_since for p, link in self._links.items() if not link.connected}
            if absent:
                self._end_absent(absent, now)

    def _end_refused(self, refused: Mapping[str, Exception]) -> None:
        """End at once the sessions with peers whose every connection is refused for a reason
        waiting will not fix (the link says so after repeated identical handshake refusals)."""
        for session, members in self._mux.waiting_on(refused):
            peer = members[0]
            self._mux.fail(session, self._unreachable(peer, refused[peer]), notify_except=peer)

    def _unreachable(self, peer: str, cause: Exception) -> PeerUnreachable:
        return PeerUnreachable(
            peer,
            f"cannot connect to party {peer!r}: {cause}. Waiting will not"
            " fix this: check that the address is the party's, that its id is spelled as in its"
            " certificate, and that both certificates come from the federation's CA"
            " (p2pboost certs)",
        )

    def _end_absent(self, absent: Mapping[str, float], now: float) -> None:
        """End the sessions of peers away for longer than ``reconnect_timeout`` (counted from
        when the peer left, or from when the session began if that was later)."""
        limit = self.config.reconnect_timeout
        for session, members in self._mux.waiting_on(absent):
            for peer in members:
                away = now - max(absent[peer], session.created_at)
                if away > limit:
                    self._mux.fail(
                        session,
                        PeerDisconnected(
                            peer,
                            f"peer {peer!r} unreachable for {away:.1f} s (reconnect_timeout"
                            f" {limit} s); session {session.id!r} ended",
                        ),
                        notify_except=peer,
                    )
                    break

    # -- links --------------------------------------------------------------------------------

    def _link_peer_reset(self, link: Link, reason: str) -> None:
        self._mux.peer_reset(link.peer, reason)

    def _link_state_changed(self, link: Link) -> None:
        event = self._connected_events.get(link.peer)
        if event is not None:
            if link.connected:
                event.set()
            else:
                event.clear()
        self._mux.wake(link.peer)

    def is_connected(self, peer: str) -> bool:
        """Whether a connection to ``peer`` is up right now (it may drop at any moment)."""
        self._mux.check_peers([peer])
        link = self._links.get(peer)
        return link is not None and link.connected

    async def wait_connected(self, peer: str) -> None:
        """Wait until a connection to ``peer`` is up (bound it with ``asyncio.timeout``).

        Lets a service fail fast while a peer is away instead of queueing work behind a
        re-dial: online serving checks this before sending a batch. Raises
        :class:`~p2pboost.exceptions.PeerUnreachable` when every dial is refused for a reason
        waiting will not fix.
        """
        self._check_running()
        self._mux.check_peers([peer])
        link = self._links[peer]
        if link.connected:
            return
        event = self._connected_events.get(peer)
        if event is None:
            event = self._connected_events[peer] = asyncio.Event()
        event.clear()
        while not link.connected:
            if link.fatal is not None:
                raise self._unreachable(peer, link.fatal)
            await event.wait()
            event.clear()

    # -- sessions -----------------------------------------------------------------------------

    def session(self, session_id: str, peers: Iterable[str] | None = None) -> Session:
        """Open session ``session_id`` with ``peers``, or claim it if peers opened it first.

        Frames for a session may arrive before this call; they wait in the channels' windows,
        kept apart per sending peer. This call adopts what the declared ``peers`` sent and
        refuses what anyone else sent for the name (an ABORT to them; the session is not
        touched); from then on only ``peers`` take part in it. Without ``peers`` it claims the
        session one peer opened under that name (the earliest), like :meth:`accept_session`.
        """
        self._check_running()
        return self._mux.open(session_id, peers)

    async def accept_session(self) -> Session:
        """Wait for a session a peer opened and nobody here claimed yet, and claim it.

        The session is that one peer's (``session.peers`` names it): another party writing
        under the same name can neither join it nor take it over; its frames wait apart, and
        are offered as its own session once the first one is over. Sessions are offered in
        the order they were opened. Bound the wait with ``asyncio.timeout`` /
        ``anyio.fail_after`` if needed.
        """
        self._check_running()
        return await self._mux.accept()

    def _check_running(self) -> None:
        if not self._running or self._close_started:
            raise LocalProtocolError("node is not running (use `async with Node(...)`)")

    # -- statistics ---------------------------------------------------------------------------

    def stats(self) -> NodeStats:
        """A snapshot of per-peer counters and of the bytes the node buffers."""
        counters = self._mux.peer_counters()
        peers = {
            peer: PeerStats(
                peer=peer,
                connected=link.connected,
                bytes_sent=link.bytes_sent,
                bytes_received=link.bytes_received,
                messages_sent=counters[peer][1],
                messages_received=counters[peer][2],
                wire_messages_sent=link.wire_messages_sent,
                wire_messages_received=link.wire_messages_received,
                connections=link.connections,
                dial_attempts=link.dial_attempts,
                link_errors=link.link_errors,
                resend_buffer_bytes=link.resend_bytes,
                receive_buffer_bytes=counters[peer][0],
            )
            for peer, link in self._links.items()
        }
        buffered = sum(p.resend_buffer_bytes + p.receive_buffer_bytes for p in peers.values())
        return NodeStats(self.party_id, self._mux.session_count, buffered, MappingProxyType(peers))
