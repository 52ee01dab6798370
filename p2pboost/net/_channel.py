"""Channels: named, ordered message pipes to one peer, with credit-based flow control.

A :class:`Channel` is what protocol coroutines talk through: ``send`` / ``recv`` (and streams)
of messages to one peer inside a session. Many channels share one link per peer.

Flow control is per channel and per direction, in bytes, like HTTP/2 windows: the receiver
announces how far the sender may go (cumulative ``allowed``), and raises it as the application
consumes messages. So a slow consumer stalls only its own producer, and what a peer can make us
hold is bounded by the window per channel (plus, on a channel where the application waits for
a message larger than the window, that one message, at most ``max_message_bytes``).
Each frame costs its payload plus :data:`~p2pboost.net._frames.FRAME_OVERHEAD` credit, so floods
of tiny frames are bounded too. A peer that exceeds its credit breaks the protocol: the session
ends with :class:`~p2pboost.exceptions.RemoteProtocolError`.

A channel has two sides. The application's: ``send``, ``recv``, ``stream``, ... The session's
(the multiplexer in :mod:`p2pboost.net._mux`, as asyncio's protocols call
``StreamReader.feed_data``): :meth:`Channel.feed_data`, :meth:`~Channel.feed_credit`,
:meth:`~Channel.feed_eof`, :meth:`~Channel.release`, :meth:`~Channel.wake` and
:meth:`~Channel.bind`, which applications never call. What a channel needs of its session is
as narrow: the session's ``id``, ``state`` and ``error``, the peer's side of the session
(:class:`ChannelSession`), and a function that fails the session. A channel holds no state of
its own about its session's life: the session's transition tables
(:mod:`p2pboost.net._states`) do, and the channel reads them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import Protocol

from p2pboost import codec
from p2pboost.exceptions import (
    CodecError,
    InputError,
    LocalProtocolError,
    P2PBoostError,
    RemoteProtocolError,
    SessionClosed,
)
from p2pboost.net._frames import (
    FLAG_END,
    FLAG_EOS,
    FLAG_RAW,
    FRAME_OVERHEAD,
    Data,
    credit_frame,
    data_header,
    datax_header,
    encode_name,
)
from p2pboost.net._link import Link
from p2pboost.net._states import PeerSide, SessionState
from p2pboost.net.config import NodeConfig

__all__ = ["Channel", "ChannelSession", "StreamWriter", "ended_error"]

#: Payloads below this size are copied out of a coalesced transport message (see feed_data).
_PIN_LIMIT = 64 * 1024
#: Fragments from this size on go as DATAX: header, then the payload as its own transport
#: message, so that neither side copies it (joining it to a header would cost a copy of the
#: whole payload, and with it fresh memory, per message).
_EXTERNAL_MIN = 64 * 1024
#: Credit is raised once the application has consumed 1/_GRANT_STEP of the window.
_GRANT_STEP = 2


class _Item:
    """One received message (``data is None``: an end-of-stream marker; ``raw``: plain bytes,
    not codec-encoded)."""

    __slots__ = ("cost", "data", "raw")

    def __init__(
        self, data: bytes | bytearray | memoryview | None, cost: int, raw: bool = False
    ) -> None:
        self.data = data
        self.cost = cost
        self.raw = raw


class ChannelSession(Protocol):
    """What a channel reads of its session (:class:`~p2pboost.net._mux.Session` has these)."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> SessionState: ...

    @property
    def error(self) -> P2PBoostError | None: ...

    def side(self, peer: str) -> PeerSide:
        """``peer``'s side of the session: a channel to a peer that left raises on use."""
        ...

    def open_to(self, peer: str) -> bool:
        """Whether the session and ``peer``'s side of it are both open (one lookup: every
        message a channel sends or receives asks it)."""
        ...


def ended_error(session: ChannelSession) -> P2PBoostError:
    """The error that using ``session`` (no longer open) raises."""
    if session.state is SessionState.FAILED:
        assert session.error is not None
        return session.error
    return SessionClosed(f"session {session.id!r} is closed")


class Channel:
    """A named, ordered message pipe to one peer inside a session.

    ``send`` returns once the message is queued on the link within the peer's credit (it waits
    while the peer's window is full, which is the back-pressure); ``recv`` returns the next
    message, decoded by :mod:`p2pboost.codec`. For long sequences use :meth:`stream` on the
    receiving side and :meth:`stream_writer` or :meth:`send_stream` on the sending side: the
    sender ends the stream with an explicit end-of-stream marker.
    """

    def __init__(
        self,
        session: ChannelSession,
        peer: str,
        name: str,
        *,
        link: Link,
        config: NodeConfig,
        fail: Callable[[P2PBoostError], None],
    ) -> None:
        """Made by the session (``session.channel(peer, name)``), never by applications.

        ``fail`` ends the session on an error the channel finds (a send interrupted half-way,
        an undecodable message). Whether the peer has left the session is the session's to
        say (:meth:`ChannelSession.side`, one table for every channel to that peer).
        Raises ValueError for an empty or over-long name.
        """
        self.session = session
        self.peer = peer
        self.name = name
        self._config = config
        self._link = link
        self._fail = fail
        self._names = encode_name(session.id) + encode_name(name)
        # -- sending --
        self._send_lock = asyncio.Lock()
        self._sent = 0  # credit used (payload + FRAME_OVERHEAD per frame)
        self._allowed = 0  # highest CREDIT received (0: only the initial window so far)
        self._send_event = asyncio.Event()
        # -- receiving --
        self._queue: deque[_Item] = deque()
        self._queued = 0
        self._partial: list[bytes | bytearray | memoryview] = []
        self._partial_cost = 0
        self._partial_len = 0
        self._partial_raw = False
        self._received = 0
        self._consumed = 0
        self._announced = self._config.window
        self._recv_event = asyncio.Event()
        self._readers = 0  # tasks waiting in recv()/stream()
        self.messages_sent = 0
        self.messages_received = 0

    def __repr__(self) -> str:
        return f"<Channel {self.session.id!r}/{self.name!r} to {self.peer!r}>"

    @property
    def buffered_bytes(self) -> int:
        """Bytes received on this channel and not yet consumed (queued plus partial)."""
        return self._queued + self._partial_cost

    # -- sending ------------------------------------------------------------------------------

    async def send(self, obj: object) -> None:
        """Send one message (anything :func:`p2pboost.codec.encode` accepts).

        ``bytes`` and ``bytearray`` skip msgpack: they travel as they are (flag RAW) and
        arrive as ``bytes``, exactly as the codec would deliver them, minus two copies.
        """
        self._check_open()
        if type(obj) is bytes and obj:  # exact type: subclasses (numpy.bytes_) use the codec
            await self._send_payload(obj, eos=False, raw=True)
        elif type(obj) is bytearray and obj:
            await self._send_payload(bytes(obj), eos=False, raw=True)  # frozen for resending
        else:
            await self._send_payload(codec.encode(obj), eos=False)

    async def send_stream(self, items: AsyncIterable[object] | Iterable[object]) -> int:
        """Send every item of ``items`` then the end-of-stream marker; returns the count."""
        count = 0
        if isinstance(items, AsyncIterable):
            async for item in items:
                await self.send(item)
                count += 1
        else:
            for item in items:
                await self.send(item)
                count += 1
        await self.end_stream()
        return count

    def stream_writer(self) -> StreamWriter:
        """``async with ch.stream_writer() as w: await w.send(x)``; the exit ends the stream."""
        return StreamWriter(self)

    async def end_stream(self) -> None:
        """Send the end-of-stream marker that ends the receiver's :meth:`stream` loop."""
        self._check_open()
        await self._send_payload(b"", eos=True)

    def _check_open(self) -> None:
        """Raise unless both the session and the peer's side of it are still open."""
        session = self.session
        if session.open_to(self.peer):
            return
        if session.state is not SessionState.OPEN:
            raise ended_error(session)
        if session.side(self.peer) is not PeerSide.OPEN:
            raise SessionClosed(f"peer {self.peer!r} left session {session.id!r}")

    async def _send_payload(self, payload: bytes, *, eos: bool, raw: bool = False) -> None:
        config = self._config
        if len(payload) > config.max_message_bytes:
            raise InputError(
                f"message of {len(payload)} bytes exceeds max_message_bytes"
                f" ({config.max_message_bytes})"
            )
        link = self._link
        view = memoryview(payload)
        total = len(payload)
        async with self._send_lock:
            offset = 0
            started = False
            try:
                while True:
                    self._check_open()
                    window = link.peer_window
                    if window is None:  # no HELLO from the peer yet
                        self._send_event.clear()
                        await self._send_event.wait()
                        continue
                    avail = max(self._allowed, window) - self._sent - FRAME_OVERHEAD
                    remaining = total - offset
                    fragment = min(config.max_fragment, link.peer_max_fragment or 0)
                    want = min(remaining, fragment)
                    # Wait rather than split a fragment for lack of credit (a split costs a
                    # copy of both halves), as long as the credit is sure to come: the peer
                    # always grants at least 1/_GRANT_STEP of its window once it has read all.
                    whole_later = want + FRAME_OVERHEAD <= window // _GRANT_STEP
                    if avail < min(remaining, 1) or (avail < want and whole_later):
                        self._send_event.clear()
                        await self._send_event.wait()
                        continue
                    n = min(want, avail)
                    last = n == remaining
                    flags = (
                        (FLAG_END if last else 0)
                        | (FLAG_EOS if eos else 0)
                        | (FLAG_RAW if raw else 0)
                    )
                    seq = link.alloc_seq()
                    sid = self.session.id
                    if n >= _EXTERNAL_MIN:  # big: the payload travels as its own message
                        whole = n == total
                        blob = payload if whole else bytes(view[offset : offset + n])
                        header = datax_header(seq, flags, self._names, n)
                        link.push(seq, (header,), sid, external=blob)
                    elif n:
                        header = data_header(seq, flags, self._names, n)
                        link.push(seq, (header, view[offset : offset + n]), sid)
                    else:
                        link.push(seq, (data_header(seq, flags, self._names, 0),), sid)
                    self._sent += n + FRAME_OVERHEAD
                    offset += n
                    started = True
                    if last:
                        break
            except BaseException:
                if started and offset < total:
                    # The peer holds half a message: the channel cannot be used any more.
                    self._fail(
                        LocalProtocolError(
                            f"send on channel {self.name!r} was interrupted mid-message"
                        )
                    )
                raise
        if not eos:
            self.messages_sent += 1
        if link.unwritten_bytes > config.coalesce_bytes:
            # Let the writer (and everyone else) run: a producer with credit to spare never
            # suspends otherwise, and would starve the loop.
            await asyncio.sleep(0)

    # -- receiving ----------------------------------------------------------------------------

    async def recv(self) -> object:
        """The next message (bound the wait with ``asyncio.timeout`` if needed)."""
        item = await self._next_item()
        if item.data is None:
            raise LocalProtocolError(
                f"recv() on channel {self.name!r} met an end-of-stream marker:"
                f" peer {self.peer!r} sent a stream here (read it with stream())"
            )
        return self._decode(item)

    def stream(self) -> AsyncIterator[object]:
        """Iterate over messages until the peer's end-of-stream marker."""
        return _Stream(self)

    async def _next_item(self) -> _Item:
        while True:
            if self._queue:
                item = self._queue.popleft()
                self._queued -= item.cost
                self._consumed += item.cost
                if item.data is not None:
                    self.messages_received += 1
                self._grant()
                return item
            self._check_open()
            self._recv_event.clear()
            self._readers += 1
            try:
                self._grant()  # a reader now waits for the message in progress: let it finish
                await self._recv_event.wait()
            finally:
                self._readers -= 1

    def _decode(self, item: _Item) -> object:
        data = item.data
        assert data is not None
        if item.raw:
            return bytes(data)  # no copy when reassembled from fragments (already bytes)
        try:
            return codec.decode(data, limits=self._config.codec_limits)
        except CodecError as exc:
            error = RemoteProtocolError(
                f"undecodable message on channel {self.name!r} of session"
                f" {self.session.id!r}: {exc}",
                peer=self.peer,
            )
            self._fail(error)
            raise error from exc

    # -- the session's side (p2pboost.net._mux; applications never call these) -----------------

    def feed_data(self, frame: Data, batched: bool) -> None:
        """Take one DATA frame from the link; raises RemoteProtocolError on a violation.

        ``batched``: the frame shared its transport message with others, so a small payload is
        copied out rather than pinning the whole message.
        """
        config = self._config
        n = len(frame.payload)
        cost = n + FRAME_OVERHEAD
        if self._received + cost > self._announced:
            raise self._violation(
                f"sent beyond its credit on channel {self.name!r}"
                f" ({self._received + cost} > {self._announced} bytes)"
            )
        if n > config.max_fragment:
            raise self._violation(f"sent a fragment of {n} bytes (limit {config.max_fragment})")
        end = frame.flags & FLAG_END
        raw = bool(frame.flags & FLAG_RAW)
        if frame.flags & FLAG_EOS:
            if n or not end or raw or self._partial:
                raise self._violation("sent a malformed end-of-stream marker")
        elif n == 0:
            raise self._violation("sent an empty fragment")
        elif self._partial and raw != self._partial_raw:
            raise self._violation("changed the RAW flag in the middle of a message")
        self._received += cost
        if frame.flags & FLAG_EOS:
            self._queue.append(_Item(None, cost))
            self._queued += cost
        else:
            self._partial_len += n
            if self._partial_len > config.max_message_bytes:
                raise self._violation(
                    f"sent a message over max_message_bytes ({config.max_message_bytes})"
                )
            # A view into a batched message would pin the whole batch: copy small parts (a
            # big one is most of its message anyway, and copying it would cost throughput).
            small = batched and n < _PIN_LIMIT
            if not self._partial or raw:
                self._partial.append(bytes(frame.payload) if small else frame.payload)
            else:
                # A message of several fragments is assembled in one growing buffer as they
                # arrive (each fragment freed at once), not joined at its end: its bytes are
                # then held once, not twice (docs/explanation/node.md: memory per message).
                head = self._partial[0]
                buffer = head if isinstance(head, bytearray) else bytearray(head)
                buffer += frame.payload
                self._partial = [buffer]
            self._partial_cost += cost
            self._partial_raw = raw
            if end:
                parts = self._partial
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                self._queue.append(_Item(data, self._partial_cost, raw))
                self._queued += self._partial_cost
                self._partial = []
                self._partial_cost = self._partial_len = 0
        self._grant()
        self._recv_event.set()

    def feed_credit(self, allowed: int) -> None:
        """The peer raised our credit to ``allowed`` (cumulative bytes)."""
        if allowed > self._allowed:
            self._allowed = allowed
            self._send_event.set()

    def bind(self, session: ChannelSession, fail: Callable[[P2PBoostError], None]) -> None:
        """Move the channel into ``session`` (its frames arrived before the application
        claimed the session, and the claim joined them to the peers' others)."""
        self.session = session
        self._fail = fail

    def feed_eof(self) -> None:
        """The peer left the session (its side, which the session holds, says so now): what it
        sent can still be read, then recv() raises."""
        self.wake()

    def _violation(self, what: str) -> RemoteProtocolError:
        return RemoteProtocolError(f"session {self.session.id!r}: {what}", peer=self.peer)

    def _grant(self) -> None:
        """Raise the peer's credit as the application consumes (batched: half a window).

        The window bounds what is buffered. One exception, so that a message larger than the
        window can arrive at all: while a reader waits on an empty queue, the message in
        progress does not count (it is what the reader asked for, and max_message_bytes bounds
        it). A channel nobody reads never holds more than the window.
        """
        window = self._config.window
        extend = self._partial_cost if self._readers and not self._queue else 0
        allowed = self._consumed + window + extend
        if (
            allowed - self._announced >= window // _GRANT_STEP
            and self.session.state is SessionState.OPEN
        ):
            self._announced = allowed
            link = self._link
            seq = link.alloc_seq()
            link.push(seq, (credit_frame(seq, self._names, allowed),), self.session.id)

    def release(self) -> None:
        """The session ended: drop what is buffered and wake every waiter."""
        self._queue.clear()
        self._partial = []
        self._queued = self._partial_cost = self._partial_len = 0
        self.wake()

    def wake(self) -> None:
        """Let every waiting send and recv look at the state again (link or session changed)."""
        self._recv_event.set()
        self._send_event.set()


class _Stream:
    """Async iterator over a channel's messages up to the end-of-stream marker."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._done = False

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> object:
        if self._done:
            raise StopAsyncIteration
        item = await self._channel._next_item()
        if item.data is None:
            self._done = True
            raise StopAsyncIteration
        return self._channel._decode(item)


class StreamWriter:
    """Sends a stream's items; leaving the ``async with`` block sends the end marker.

    If the block raises, no end marker is sent (the receiver would take a truncated stream
    for a complete one); the error propagates and the caller decides the session's fate.
    """

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self.count = 0

    async def send(self, obj: object) -> None:
        await self._channel.send(obj)
        self.count += 1

    async def __aenter__(self) -> StreamWriter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self._channel.end_stream()
