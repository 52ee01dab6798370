"""The node's wire format: one HELLO per connection, then messages that carry frames.

Everything here is pure (bytes in, values out) so it can be tested and fuzzed without a loop.

Every transport message is one of:

``HELLO``  (first message on every connection, both directions)::

    u8 0x01 | "P2PB" | u8 version | u64 epoch | u64 recv_epoch | u64 recv_seq
    | u64 window | u32 max_fragment | u8 len | party id (UTF-8)

    ``epoch`` identifies the sender's node instance (random, never 0); ``recv_epoch`` /
    ``recv_seq`` say which of the peer's frames the sender already holds (0 / 0: none), so the
    peer resends exactly the rest; ``window`` is the sender's per-channel receive window and
    ``max_fragment`` the largest DATA payload it accepts.

``FRAMES``::

    u8 0x02 | u64 ack | frame*          frame = u32 length | u8 type | u64 seq | body

    ``ack`` is the cumulative acknowledgement of the peer's frames (piggy-backed on every
    message, so an empty FRAMES message is both a stand-alone ack and a heart-beat).

Frame bodies (``sid`` and ``ch`` are ``u8 length | UTF-8``, 1..255 bytes)::

    DATA    u8 flags | sid | ch | payload          flags: END (last fragment), EOS (end of
                                                   stream), RAW (payload is plain bytes, not
                                                   codec-encoded: the zero-msgpack blob path)
    DATAX   u8 flags | sid | ch | u32 length       a DATA frame whose payload is the *next*
                                                   transport message, exactly ``length`` bytes
                                                   (big payloads: neither side copies them);
                                                   always the last frame of its message
    CREDIT  sid | ch | u64 allowed                 cumulative bytes the peer may send us
    CLOSE   sid                                    the sender left the session normally
    ABORT   sid | u16 length | reason (UTF-8)      the sender ended the session on an error
    NOP     (empty)                                a withdrawn frame keeps its sequence number

Sequence numbers are per direction of a link and count every frame (starting at 1), so one
cumulative ack covers data and control frames alike and a reconnect resends them in order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "FLAG_END",
    "FLAG_EOS",
    "FLAG_RAW",
    "FRAME_OVERHEAD",
    "MAX_NAME_BYTES",
    "MAX_REASON_BYTES",
    "WIRE_VERSION",
    "Abort",
    "Close",
    "Credit",
    "Data",
    "Frame",
    "FrameType",
    "Hello",
    "Nop",
    "WireError",
    "abort_frame",
    "close_frame",
    "credit_frame",
    "data_header",
    "datax_header",
    "encode_hello",
    "encode_message",
    "encode_name",
    "nop_frame",
    "parse_hello",
    "parse_message",
]

WIRE_VERSION = 1
_MAGIC = b"P2PB"
_HELLO = 0x01
_FRAMES = 0x02

FLAG_END = 0x01
FLAG_EOS = 0x02
FLAG_RAW = 0x04
_KNOWN_FLAGS = FLAG_END | FLAG_EOS | FLAG_RAW

MAX_NAME_BYTES = 255
MAX_REASON_BYTES = 1024

#: Credit every frame costs on top of its payload, so that a flood of tiny or empty frames
#: cannot grow a receiver's memory (each queued item costs more than its payload bytes).
FRAME_OVERHEAD = 32

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_MSG_HEAD = struct.Struct(">BQ")  # kind, ack
_FRAME_HEAD = struct.Struct(">IBQ")  # length (type..end), type, seq
_HELLO_HEAD = struct.Struct(">B4sBQQQQI")


class WireError(Exception):
    """Bytes that do not parse at the envelope level (internal: the link is reset)."""


class FrameType(IntEnum):
    DATA = 1
    CREDIT = 2
    CLOSE = 3
    ABORT = 4
    NOP = 5
    DATAX = 6


@dataclass(frozen=True, slots=True)
class Hello:
    party_id: str
    epoch: int
    recv_epoch: int
    recv_seq: int
    window: int
    max_fragment: int
    version: int = WIRE_VERSION


@dataclass(frozen=True, slots=True)
class Data:
    """A DATA frame; from a DATAX frame, ``external`` is the length of the payload still to
    come as the next transport message (the link fills ``payload`` in and sets it to 0)."""

    seq: int
    session: str
    channel: str
    flags: int
    payload: bytes | memoryview
    external: int = 0


@dataclass(frozen=True, slots=True)
class Credit:
    seq: int
    session: str
    channel: str
    allowed: int


@dataclass(frozen=True, slots=True)
class Close:
    seq: int
    session: str


@dataclass(frozen=True, slots=True)
class Abort:
    seq: int
    session: str
    reason: str


@dataclass(frozen=True, slots=True)
class Nop:
    seq: int


Frame = Data | Credit | Close | Abort | Nop


# -- encoding -----------------------------------------------------------------------------------


def encode_name(name: str) -> bytes:
    """``u8 length | UTF-8``; raises ValueError for empty or over-long names."""
    raw = name.encode("utf-8")
    if not 1 <= len(raw) <= MAX_NAME_BYTES:
        raise ValueError(f"name must be 1..{MAX_NAME_BYTES} UTF-8 bytes, got {len(raw)}")
    return bytes((len(raw),)) + raw


def encode_hello(hello: Hello) -> bytes:
    pid = hello.party_id.encode("utf-8")
    if not 1 <= len(pid) <= MAX_NAME_BYTES:
        raise ValueError("party id must be 1..255 UTF-8 bytes")
    return (
        _HELLO_HEAD.pack(
            _HELLO,
            _MAGIC,
            hello.version,
            hello.epoch,
            hello.recv_epoch,
            hello.recv_seq,
            hello.window,
            hello.max_fragment,
        )
        + bytes((len(pid),))
        + pid
    )


def data_header(seq: int, flags: int, names: bytes, payload_len: int) -> bytes:
    """Frame header of a DATA frame; ``names`` is ``encode_name(sid) + encode_name(ch)``."""
    length = 1 + 8 + 1 + len(names) + payload_len
    return _FRAME_HEAD.pack(length, FrameType.DATA, seq) + bytes((flags,)) + names


def datax_header(seq: int, flags: int, names: bytes, payload_len: int) -> bytes:
    """A DATAX frame: the payload follows as the next transport message, uncopied."""
    body = bytes((flags,)) + names + _U32.pack(payload_len)
    return _FRAME_HEAD.pack(9 + len(body), FrameType.DATAX, seq) + body


def credit_frame(seq: int, names: bytes, allowed: int) -> bytes:
    body = names + _U64.pack(allowed)
    return _FRAME_HEAD.pack(9 + len(body), FrameType.CREDIT, seq) + body


def close_frame(seq: int, sid: bytes) -> bytes:
    return _FRAME_HEAD.pack(9 + len(sid), FrameType.CLOSE, seq) + sid


def abort_frame(seq: int, sid: bytes, reason: str) -> bytes:
    raw = reason.encode("utf-8")[:MAX_REASON_BYTES]
    raw = raw.decode("utf-8", "ignore").encode("utf-8")  # never cut a character in half
    body = sid + struct.pack(">H", len(raw)) + raw
    return _FRAME_HEAD.pack(9 + len(body), FrameType.ABORT, seq) + body


def nop_frame(seq: int) -> bytes:
    return _FRAME_HEAD.pack(9, FrameType.NOP, seq)


def encode_message(ack: int, parts: Sequence[bytes | memoryview]) -> bytes:
    """One FRAMES message: the header then the already-encoded frame parts, copied once."""
    return b"".join([_MSG_HEAD.pack(_FRAMES, ack), *parts])


# -- parsing ------------------------------------------------------------------------------------


def parse_hello(message: bytes) -> Hello:
    """Parse a HELLO message; raises :class:`WireError` for anything else."""
    if len(message) < _HELLO_HEAD.size + 2:
        raise WireError("HELLO too short")
    kind, magic, version, epoch, recv_epoch, recv_seq, window, max_fragment = (
        _HELLO_HEAD.unpack_from(message)
    )
    if kind != _HELLO or magic != _MAGIC:
        raise WireError("first message is not a p2pboost HELLO")
    if version != WIRE_VERSION:
        raise WireError(f"unsupported wire version {version} (this node speaks {WIRE_VERSION})")
    n = message[_HELLO_HEAD.size]
    start = _HELLO_HEAD.size + 1
    if n == 0 or len(message) != start + n:
        raise WireError("HELLO has a malformed party id")
    try:
        party_id = bytes(message[start : start + n]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError("HELLO party id is not UTF-8") from exc
    if epoch == 0 or window == 0 or max_fragment == 0:
        raise WireError("HELLO has a zero epoch, window or fragment size")
    if recv_epoch == 0 and recv_seq != 0:
        raise WireError("HELLO acknowledges frames of no epoch")
    return Hello(party_id, epoch, recv_epoch, recv_seq, window, max_fragment, version)


def _name(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    if pos >= end:
        raise WireError("frame truncated before a name")
    n = buf[pos]
    pos += 1
    if n == 0 or pos + n > end:
        raise WireError("frame has an empty or truncated name")
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise WireError("frame name is not UTF-8") from exc


def parse_message(message: bytes | bytearray | memoryview) -> tuple[int, list[Frame]]:
    """Parse a FRAMES message into ``(ack, frames)``; raises :class:`WireError` if malformed.

    DATA payloads are zero-copy views into ``message``.
    """
    buf = memoryview(message)
    if len(buf) < _MSG_HEAD.size:
        raise WireError("message too short")
    kind, ack = _MSG_HEAD.unpack_from(buf)
    if kind != _FRAMES:
        raise WireError(f"unexpected message kind {kind:#x}")
    frames: list[Frame] = []
    pos = _MSG_HEAD.size
    total = len(buf)
    while pos < total:
        if pos + _FRAME_HEAD.size > total:
            raise WireError("truncated frame header")
        length, ftype, seq = _FRAME_HEAD.unpack_from(buf, pos)
        end = pos + 4 + length
        if length < 9 or end > total:
            raise WireError("frame length out of bounds")
        if seq == 0:
            raise WireError("frame sequence number 0")
        pos += _FRAME_HEAD.size
        frame: Frame
        if ftype == FrameType.DATA:
            if pos >= end:
                raise WireError("DATA frame without flags")
            flags = buf[pos]
            if flags & ~_KNOWN_FLAGS:
                raise WireError(f"unknown DATA flags {flags:#x}")
            sid, pos = _name(buf, pos + 1, end)
            ch, pos = _name(buf, pos, end)
            frame = Data(seq, sid, ch, flags, buf[pos:end])
        elif ftype == FrameType.CREDIT:
            sid, pos = _name(buf, pos, end)
            ch, pos = _name(buf, pos, end)
            if end - pos != 8:
                raise WireError("CREDIT frame has a malformed body")
            frame = Credit(seq, sid, ch, _U64.unpack_from(buf, pos)[0])
        elif ftype == FrameType.CLOSE:
            sid, pos = _name(buf, pos, end)
            if pos != end:
                raise WireError("CLOSE frame has trailing bytes")
            frame = Close(seq, sid)
        elif ftype == FrameType.ABORT:
            sid, pos = _name(buf, pos, end)
            if end - pos < 2:
                raise WireError("ABORT frame truncated")
            (n,) = struct.unpack_from(">H", buf, pos)
            if n > MAX_REASON_BYTES or pos + 2 + n != end:
                raise WireError("ABORT frame has a malformed reason")
            try:
                reason = str(buf[pos + 2 : end], "utf-8")
            except UnicodeDecodeError as exc:
                raise WireError("ABORT reason is not UTF-8") from exc
            frame = Abort(seq, sid, reason)
        elif ftype == FrameType.DATAX:
            if pos >= end:
                raise WireError("DATAX frame without flags")
            flags = buf[pos]
            if flags & ~_KNOWN_FLAGS:
                raise WireError(f"unknown DATA flags {flags:#x}")
            sid, pos = _name(buf, pos + 1, end)
            ch, pos = _name(buf, pos, end)
            if end - pos != 4 or end != total:
                raise WireError("DATAX frame malformed or not the last frame of its message")
            (length,) = _U32.unpack_from(buf, pos)
            if length == 0:
                raise WireError("DATAX frame announces an empty payload")
            frame = Data(seq, sid, ch, flags, b"", external=length)
        elif ftype == FrameType.NOP:
            if pos != end:
                raise WireError("NOP frame has a body")
            frame = Nop(seq)
        else:
            raise WireError(f"unknown frame type {ftype}")
        frames.append(frame)
        pos = end
    return ack, frames
