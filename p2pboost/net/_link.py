"""The reliable link to one peer: sequence numbers, cumulative acks, resend, heart-beats.

A :class:`Link` outlives the connections under it. Every frame gets the next sequence number
and stays in the *resend buffer* until the peer acknowledges it; when a connection breaks and a
new one comes up, the two HELLOs say which frames each side already holds, and the writer
resumes right after those. So a drop mid-stream loses nothing and delivers nothing twice.

Flow control (per channel, in :mod:`p2pboost.net._channel`) bounds what enters the buffer, so the
buffer is bounded too. Acks ride on every outgoing message; a stand-alone (empty) message is
sent only when half a window is unacked or ``ack_delay`` passed, or as a heart-beat after
``heartbeat_interval`` of silence.

The link never interprets session frames: it hands them on through its :class:`LinkHooks`
(the node wires them to the session multiplexer, :mod:`p2pboost.net._mux`), so the link needs
neither the node nor the sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from p2pboost.net._frames import (
    Data,
    Frame,
    Hello,
    WireError,
    encode_hello,
    encode_message,
    nop_frame,
    parse_hello,
    parse_message,
)
from p2pboost.transports.base import Connection, Transport
from p2pboost.transports.errors import HandshakeError, TransportError

__all__ = ["FrameSink", "Link", "LinkHooks", "LinkSettings"]

logger = logging.getLogger("p2pboost.net.node")
#: A WebSocket close the peer meant: 1000 (normal), 1001 (going away: its process ends).
#: The transport reports it in its message only ("..., code 1000").
_NORMAL_CLOSE = re.compile(r"closed the connection, code 100[01]\b")


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """The subset of the node configuration a link needs (see ``NodeConfig``)."""

    window: int
    max_fragment: int
    coalesce_bytes: int
    ack_delay: float
    heartbeat_interval: float
    heartbeat_timeout: float
    connect_timeout: float
    backoff_initial: float
    backoff_max: float


#: A refused handshake counts as permanent after this many identical refusals in a row over at
#: least :data:`PERMANENT_AFTER_SECONDS` (a peer shutting down or restarting may refuse a few
#: handshakes in a moment; a wrong certificate, id or port refuses them all, for good).
PERMANENT_AFTER = 3
PERMANENT_AFTER_SECONDS = 1.0
#: Seconds between the lines that say a peer is still unreachable (the rest go to DEBUG).
RETRY_LOG_INTERVAL = 30.0

#: Takes the frames of one transport message from ``peer``, in sequence order; ``batched``:
#: several frames shared the message (their payloads are views into it).
FrameSink = Callable[[str, list[Frame], bool], None]


@dataclass(frozen=True, slots=True)
class LinkHooks:
    """How a link reports to its owner: plain callables, so the link imports neither the node
    nor the sessions (dependencies point one way: node -> _mux -> _link)."""

    #: Frames from the peer (the multiplexer's dispatch; called once per transport message).
    deliver: FrameSink
    #: A connection came up or went down (``link.connected`` says which).
    state_changed: Callable[[Link], None]
    #: The peer restarted and lost its state (the reason, for the sessions it was in).
    peer_reset: Callable[[Link, str], None]
    #: A transport's exception as the library reports it (used for the log).
    explain: Callable[[TransportError], Exception]


class _Entry:
    """One frame in the resend buffer (``parts`` are joined into a message when written;
    ``external`` is a DATAX frame's payload, written as the next message on its own)."""

    __slots__ = ("external", "parts", "seq", "session", "size")

    def __init__(
        self,
        seq: int,
        parts: tuple[bytes | memoryview, ...],
        session: str | None,
        size: int,
        external: bytes | None,
    ) -> None:
        self.seq = seq
        self.parts = parts
        self.session = session
        self.size = size
        self.external = external


class Link:
    """Reliable, ordered frame delivery to ``peer`` over successive connections."""

    def __init__(
        self,
        hooks: LinkHooks,
        local_id: str,
        peer: str,
        epoch: int,
        settings: LinkSettings,
        dial_address: str | None,
    ) -> None:
        self.hooks = hooks
        self._deliver = hooks.deliver  # looked up once: the read loop calls it per message
        self.local_id = local_id
        self.peer = peer
        self.epoch = epoch
        self.settings = settings
        self.dial_address = dial_address
        loop = asyncio.get_running_loop()
        self._loop = loop
        # -- send direction --
        self._next_seq = 1
        self._buffer: dict[int, _Entry] = {}
        self._acked = 0
        self._write_seq = 1
        self.resend_bytes = 0
        #: Pushed since the writer last ran: senders yield to it beyond ``coalesce_bytes``.
        self.unwritten_bytes = 0
        # -- receive direction --
        self.peer_epoch = 0
        self._recv_seq = 0
        self._ack_sent = 0
        self._unacked_bytes = 0
        self._ack_due: float | None = None
        # -- what the peer told us in its HELLO --
        self.peer_window: int | None = None  # None until the first HELLO
        self.peer_max_fragment: int | None = None
        # -- connection --
        self.connected = False
        self.away_since = loop.time()
        self.last_recv = self.last_send = loop.time()
        self._dead: asyncio.Event | None = None
        self._run_lock = asyncio.Lock()
        self._generation = 0
        self._wake = asyncio.Event()
        #: Wakes the writer for the next heart-beat or delayed ack (see _arm_timer).
        self._timer: asyncio.TimerHandle | None = None
        self.closing = False
        # -- statistics --
        self.bytes_sent = self.bytes_received = 0
        self.wire_messages_sent = self.wire_messages_received = 0
        self.frames_sent = self.frames_received = 0
        self.connections = 0
        self.dial_attempts = 0
        self.link_errors = 0
        # -- why dialing fails --
        #: Set when every dial is refused by the handshake for the same reason (cleared by the
        #: next connection that works, or the next dial that fails otherwise): waiting will not
        #: fix it, so sessions fail at once.
        self.fatal: Exception | None = None
        self._failure: str | None = None
        self._failures = 0
        self._failing_since = 0.0
        self._logged_at = 0.0

    # -- sending ------------------------------------------------------------------------------

    def alloc_seq(self) -> int:
        """Reserve the next sequence number; :meth:`push` must follow without awaiting."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def push(
        self,
        seq: int,
        parts: tuple[bytes | memoryview, ...],
        session: str | None,
        external: bytes | None = None,
    ) -> None:
        """Queue frame ``seq`` (from :meth:`alloc_seq`) for sending and resending.

        ``external``: the payload of a DATAX frame (``parts`` holds its header).
        """
        size = sum(map(len, parts)) + (0 if external is None else len(external))
        entry = _Entry(seq, parts, session, size, external)
        self._buffer[seq] = entry
        self.resend_bytes += entry.size
        self.unwritten_bytes += entry.size
        self._wake.set()

    def withdraw(self, session: str) -> None:
        """Replace the unacked frames of ``session`` by NOPs (it failed: free their memory)."""
        for entry in self._buffer.values():
            if entry.session == session:
                self.resend_bytes -= entry.size
                entry.parts = (nop_frame(entry.seq),)
                entry.size = len(entry.parts[0])
                entry.session = None
                entry.external = None
                self.resend_bytes += entry.size

    @property
    def drained(self) -> bool:
        """True when the peer acknowledged every frame queued so far."""
        return self._acked == self._next_seq - 1

    def _on_ack(self, ack: int) -> None:
        if ack >= self._next_seq:
            raise WireError(f"ack {ack} for a frame never sent (last is {self._next_seq - 1})")
        buffer = self._buffer
        for seq in range(self._acked + 1, ack + 1):
            entry = buffer.pop(seq, None)
            if entry is not None:
                self.resend_bytes -= entry.size
        if ack > self._acked:
            self._acked = ack
            self._write_seq = max(self._write_seq, ack + 1)

    # -- connections --------------------------------------------------------------------------

    def kill(self, reason: str) -> None:
        """Abandon the current connection (the writer resends over the next one)."""
        if self._dead is not None and not self._dead.is_set():
            logger.info("%s: dropping connection to %r: %s", self.local_id, self.peer, reason)
            self._dead.set()

    async def run(self, conn: Connection, spawn: Callable[..., object]) -> None:
        """Drive ``conn`` until it breaks: HELLO exchange, then reader and writer.

        ``spawn`` starts a background task owned by the node (used to close the old
        connection without blocking a reconnect on a slow closing handshake).
        """
        self.kill("replaced by a new connection")
        self._generation += 1
        generation = self._generation
        async with self._run_lock:
            if self.closing or generation != self._generation:  # a newer connection won
                spawn(_close_quietly(conn), name="p2pboost-close")
                return
            dead = self._dead = asyncio.Event()
            tasks: list[asyncio.Task[Any]] = []
            try:
                await conn.send(encode_hello(self._hello()))
                async with asyncio.timeout(self.settings.heartbeat_timeout):
                    first = await conn.receive()
                hello = parse_hello(first)
                if hello.party_id != self.peer:
                    raise WireError(f"HELLO claims party {hello.party_id!r}")
                self._apply_hello(hello)
                self.connections += 1
                self.connected = True
                self.fatal, self._failure, self._failures = None, None, 0
                self.away_since = self.last_recv = self.last_send = self._loop.time()
                self.hooks.state_changed(self)
                # One at a time into the list the ``finally`` cancels and awaits: none of the
                # three may outlive this connection, even if starting the next one failed.
                tasks.append(asyncio.create_task(self._read_loop(conn)))
                tasks.append(asyncio.create_task(self._write_loop(conn)))
                tasks.append(asyncio.create_task(dead.wait()))
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if not task.cancelled() and task.exception() is not None:
                        self._log_end(task.exception())
            except Exception as exc:  # the link must outlive anything one connection does
                self._log_end(exc)
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(BaseException):
                        await task
                if self.connected:
                    self.connected = False
                    self.away_since = self._loop.time()
                self._dead = None
                spawn(_close_quietly(conn), name="p2pboost-close")
                self.hooks.state_changed(self)

    def _log_end(self, exc: BaseException | None) -> None:
        if isinstance(exc, WireError):
            self.link_errors += 1
            logger.warning("%s: protocol error on link to %r: %s", self.local_id, self.peer, exc)
        elif exc is not None and not isinstance(exc, TransportError | TimeoutError | OSError):
            logger.error(
                "%s: link to %r failed unexpectedly", self.local_id, self.peer, exc_info=exc
            )
        else:
            if isinstance(exc, TransportError):
                exc = self.hooks.explain(exc)
            if _NORMAL_CLOSE.search(str(exc)):  # the peer is done: the end of a clean run
                logger.info("%s: %r closed its connection normally", self.local_id, self.peer)
                return
            logger.info("%s: connection to %r ended: %s", self.local_id, self.peer, exc)

    async def dial_forever(self, transport: Transport, spawn: Callable[..., object]) -> None:
        """Connect to the peer, run the connection, and reconnect with capped back-off."""
        assert self.dial_address is not None
        attempt = 0
        rng = random.Random()
        s = self.settings
        while not self.closing:
            self.dial_attempts += 1
            try:
                async with asyncio.timeout(s.connect_timeout):
                    conn = await transport.connect(self.dial_address, peer_id=self.peer)
            except TransportError as exc:
                self._dial_failed(
                    self.hooks.explain(exc), permanent=isinstance(exc, HandshakeError)
                )
            except (TimeoutError, OSError) as exc:
                self._dial_failed(exc, permanent=False)
            except Exception:  # a transport bug must not stop the node from retrying
                logger.exception("%s: connecting to %r failed", self.local_id, self.peer)
            else:
                before = self.connections
                await self.run(conn, spawn)
                if self.connections > before:
                    attempt = 0  # it worked for a while: start the back-off afresh
            # Exponential back-off with "equal jitter": half fixed, half random, capped.
            delay = min(s.backoff_max, s.backoff_initial * 2**attempt)
            attempt = min(attempt + 1, 30)
            await asyncio.sleep(delay / 2 + rng.random() * delay / 2)

    def _dial_failed(self, error: BaseException, *, permanent: bool) -> None:
        """Count a failed dial; log the first of a run and then one line per
        :data:`RETRY_LOG_INTERVAL`; after :data:`PERMANENT_AFTER` identical handshake refusals
        over :data:`PERMANENT_AFTER_SECONDS`, set :attr:`fatal` (and tell the node, which ends
        the sessions waiting on the peer)."""
        now = self._loop.time()
        text = str(error)
        if text != self._failure:  # something else now: the peer may be on its way back
            self._failure, self._failures, self._failing_since = text, 0, now
            self.fatal = None
        self._failures += 1
        if self._failures == 1 or now - self._logged_at >= RETRY_LOG_INTERVAL:
            self._logged_at = now
            if self._failures == 1:
                logger.info("%s: cannot reach %r: %s", self.local_id, self.peer, text)
            else:
                logger.info(
                    "%s: still cannot reach %r at %s (%d attempts in %.0f s): %s",
                    self.local_id,
                    self.peer,
                    self.dial_address,
                    self._failures,
                    now - self._failing_since,
                    text,
                )
        else:
            logger.debug("%s: cannot reach %r: %s", self.local_id, self.peer, text)
        lasting = now - self._failing_since >= PERMANENT_AFTER_SECONDS
        if permanent and lasting and self._failures >= PERMANENT_AFTER and self.fatal is None:
            self.fatal = error if isinstance(error, Exception) else None
            self.hooks.state_changed(self)

    # -- HELLO --------------------------------------------------------------------------------

    def _hello(self) -> Hello:
        return Hello(
            party_id=self.local_id,
            epoch=self.epoch,
            recv_epoch=self.peer_epoch,
            recv_seq=self._recv_seq if self.peer_epoch else 0,
            window=self.settings.window,
            max_fragment=self.settings.max_fragment,
        )

    def _apply_hello(self, hello: Hello) -> None:
        # 1. The peer's sending side: the same instance resumes, a new one starts afresh.
        if hello.epoch != self.peer_epoch:
            if self.peer_epoch:
                self.hooks.peer_reset(self, f"peer {self.peer!r} restarted")
                self._reset_send_state()
            self.peer_epoch = hello.epoch
            self._recv_seq = 0
            self._ack_sent = 0
            self._unacked_bytes = 0
            self._ack_due = None
        # 2. Our sending side: resume right after what the peer holds.
        if hello.recv_epoch == self.epoch and hello.recv_seq:
            if hello.recv_seq >= self._next_seq or hello.recv_seq < self._acked:
                raise WireError(
                    f"HELLO acknowledges frame {hello.recv_seq}, outside"
                    f" [{self._acked}, {self._next_seq - 1}]"
                )
            self._on_ack(hello.recv_seq)
            self._write_seq = hello.recv_seq + 1
        else:
            # The peer holds nothing of ours: everything still buffered goes out again.
            self._write_seq = self._acked + 1
        self.peer_window = hello.window
        self.peer_max_fragment = hello.max_fragment

    def _reset_send_state(self) -> None:
        """The peer lost its state: frames for it are meaningless (its sessions were failed)."""
        self._buffer.clear()
        self.resend_bytes = 0
        self._acked = self._next_seq - 1
        self._write_seq = self._next_seq

    # -- the two loops ------------------------------------------------------------------------

    async def _read_loop(self, conn: Connection) -> None:
        s = self.settings
        ack_threshold = max(1, s.window // 2)
        deliver = self._deliver
        peer = self.peer
        while True:
            message = await conn.receive()
            self.last_recv = self._loop.time()
            self.bytes_received += len(message)
            self.wire_messages_received += 1
            ack, frames = parse_message(message)
            self._on_ack(ack)
            if not frames:
                continue
            size = len(message)
            last = frames[-1]
            if isinstance(last, Data) and last.external:
                # A DATAX frame: its payload is the next message, as it is (never copied). The
                # frame counts as received only with it (a drop in between resends both).
                payload = await conn.receive()
                self.last_recv = self._loop.time()
                self.bytes_received += len(payload)
                self.wire_messages_received += 1
                if len(payload) != last.external:
                    raise WireError(
                        f"DATAX announced {last.external} bytes, the next message has"
                        f" {len(payload)}"
                    )
                frames[-1] = Data(last.seq, last.session, last.channel, last.flags, payload)
                size += len(payload)  # what the peer holds for resending until we ack it
            expected = self._recv_seq + 1 if self._recv_seq else frames[0].seq
            for frame in frames:
                if frame.seq != expected:
                    raise WireError(f"frame {frame.seq} out of order (expected {expected})")
                expected += 1
            self._recv_seq = expected - 1
            self.frames_received += len(frames)
            self._unacked_bytes += size
            if self._ack_due is None:
                self._ack_due = self.last_recv + s.ack_delay
                self._wake.set()  # the writer may sleep until the next heart-beat: re-arm it
            elif self._unacked_bytes >= ack_threshold:
                self._wake.set()
            try:
                deliver(peer, frames, len(frames) > 1)
            except Exception as exc:
                logger.exception("%s: dispatching frames from %r failed", self.local_id, self.peer)
                raise WireError("internal error while dispatching frames") from exc

    async def _write_loop(self, conn: Connection) -> None:
        try:
            await self._write_messages(conn)
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm_timer(self, deadline: float) -> None:
        """Make sure the writer wakes by ``deadline`` (loop time).

        One timer, re-armed only when it would fire too late: on a busy link the heart-beat
        deadline moves with every message, and a timer made and cancelled per message (as
        ``asyncio.timeout`` around each wait does) was a measurable share of the node's own
        work per fragment. A timer that fires before a deadline that has since moved costs one
        wake-up of the writer, which finds nothing to do and arms the next.
        """
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._wake.set()

    async def _write_messages(self, conn: Connection) -> None:
        s = self.settings
        loop = self._loop
        ack_threshold = max(1, s.window // 2)
        wake = self._wake
        while True:
            self.unwritten_bytes = 0
            parts: list[bytes | memoryview] = []
            size = 0
            nframes = 0
            buffer = self._buffer
            external: bytes | None = None
            while self._write_seq < self._next_seq:
                entry = buffer[self._write_seq]
                # Coalesce small frames; a big frame may still carry a few small ones ahead.
                if size and size + entry.size > max(s.coalesce_bytes, entry.size + 4096):
                    break
                parts.extend(entry.parts)
                size += entry.size
                nframes += 1
                self._write_seq += 1
                if entry.external is not None:  # DATAX: its header ends this message
                    external = entry.external
                    break
            now = loop.time()
            ack_wanted = self._recv_seq > self._ack_sent and (
                self._unacked_bytes >= ack_threshold
                or (self._ack_due is not None and now >= self._ack_due)
            )
            if parts or ack_wanted or now - self.last_send >= s.heartbeat_interval:
                message = encode_message(self._recv_seq, parts)
                self._ack_sent = self._recv_seq
                self._unacked_bytes = 0
                self._ack_due = None
                await conn.send(message)
                if external is not None:
                    await conn.send(external)
                    self.bytes_sent += len(external)
                    self.wire_messages_sent += 1
                self.last_send = loop.time()
                self.bytes_sent += len(message)
                self.wire_messages_sent += 1
                self.frames_sent += nframes
                continue
            wake.clear()
            deadline = self.last_send + s.heartbeat_interval
            if self._ack_due is not None and self._recv_seq > self._ack_sent:
                deadline = min(deadline, self._ack_due)
            self._arm_timer(deadline)
            await wake.wait()


async def _close_quietly(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5.0):
            await conn.close()
