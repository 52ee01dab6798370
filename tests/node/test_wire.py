"""The envelope codec, without a loop: round trips, and only WireError from garbage."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2pboost.net._frames import (
    FLAG_END,
    FLAG_EOS,
    Abort,
    Close,
    Credit,
    Data,
    Hello,
    Nop,
    WireError,
    abort_frame,
    close_frame,
    credit_frame,
    data_header,
    datax_header,
    encode_hello,
    encode_message,
    encode_name,
    nop_frame,
    parse_hello,
    parse_message,
)

names = st.text(min_size=1, max_size=60).filter(lambda s: len(s.encode()) <= 255)


def test_hello_round_trip() -> None:
    hello = Hello("guest", epoch=7, recv_epoch=9, recv_seq=123, window=1 << 20, max_fragment=4096)
    assert parse_hello(encode_hello(hello)) == hello


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:10], "too short"),
        (lambda b: b"\x02" + b[1:], "not a p2pboost HELLO"),
        (lambda b: b[:5] + b"\x09" + b[6:], "unsupported wire version"),
        (lambda b: b + b"x", "malformed party id"),
        (lambda b: b[:6] + bytes(8) + b[14:], "zero epoch"),
    ],
)
def test_bad_hello_is_refused(mutate: object, match: str) -> None:
    raw = encode_hello(Hello("p", epoch=1, recv_epoch=0, recv_seq=0, window=10, max_fragment=10))
    with pytest.raises(WireError, match=match):
        parse_hello(mutate(raw))  # type: ignore[operator]


@given(
    sid=names,
    ch=names,
    payload=st.binary(max_size=300),
    ack=st.integers(0, 2**64 - 1),
    reason=st.text(max_size=50),
    allowed=st.integers(0, 2**64 - 1),
)
def test_frames_round_trip(
    sid: str, ch: str, payload: bytes, ack: int, reason: str, allowed: int
) -> None:
    n = encode_name(sid) + encode_name(ch)
    parts = [
        data_header(1, FLAG_END | FLAG_EOS, n, len(payload)),
        payload,
        credit_frame(2, n, allowed),
        close_frame(3, encode_name(sid)),
        abort_frame(4, encode_name(sid), reason),
        nop_frame(5),
    ]
    got_ack, frames = parse_message(encode_message(ack, parts))
    assert got_ack == ack
    data = frames[0]
    assert isinstance(data, Data)
    assert (data.seq, data.session, data.channel, data.flags) == (1, sid, ch, FLAG_END | FLAG_EOS)
    assert bytes(data.payload) == payload
    assert frames[1:] == [
        Credit(2, sid, ch, allowed),
        Close(3, sid),
        Abort(4, sid, reason),
        Nop(5),
    ]


def test_empty_message_is_an_ack() -> None:
    assert parse_message(encode_message(42, [])) == (42, [])


def test_abort_reason_is_truncated_on_a_character_boundary() -> None:
    frame = abort_frame(1, encode_name("s"), "é" * 2000)
    _, [abort] = parse_message(encode_message(0, [frame]))
    assert isinstance(abort, Abort)
    assert abort.reason == "é" * 512


def test_names_are_bounded() -> None:
    with pytest.raises(ValueError, match=r"1\.\.255"):
        encode_name("")
    with pytest.raises(ValueError, match=r"1\.\.255"):
        encode_name("x" * 256)


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (b"\x02" + bytes(3), "too short"),
        (b"\x07" + bytes(8), "unexpected message kind"),
        (b"\x02" + bytes(8) + b"\x00\x00", "truncated frame header"),
        (b"\x02" + bytes(8) + struct.pack(">IBQ", 100, 5, 1), "length out of bounds"),
        (b"\x02" + bytes(8) + struct.pack(">IBQ", 9, 5, 0), "sequence number 0"),
        (b"\x02" + bytes(8) + struct.pack(">IBQ", 9, 99, 1), "unknown frame type"),
        (b"\x02" + bytes(8) + struct.pack(">IBQ", 10, 5, 1) + b"x", "NOP frame has a body"),
        (b"\x02" + bytes(8) + struct.pack(">IBQB", 10, 1, 1, 0x80), "unknown DATA flags"),
        (
            b"\x02" + bytes(8) + struct.pack(">IBQBB", 13, 1, 1, 1, 2) + b"\xff\xfe" + b"\x00",
            "not UTF-8",
        ),
        (b"\x02" + bytes(8) + struct.pack(">IBQB", 10, 3, 1, 0), "empty or truncated name"),
    ],
)
def test_malformed_messages_raise_wire_error(message: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match):
        parse_message(message)


@given(st.binary(max_size=200))
def test_random_bytes_raise_only_wire_error(raw: bytes) -> None:
    for message in (raw, b"\x02" + raw):
        with contextlib.suppress(WireError):
            parse_message(message)
    with contextlib.suppress(WireError):
        parse_hello(raw)


def test_datax_announces_a_payload_that_follows() -> None:
    names = encode_name("s") + encode_name("c")
    _, [frame] = parse_message(encode_message(3, [datax_header(9, FLAG_END, names, 1 << 20)]))
    assert isinstance(frame, Data)
    assert (frame.seq, frame.session, frame.channel, frame.external) == (9, "s", "c", 1 << 20)


@pytest.mark.parametrize(
    ("parts", "match"),
    [
        ([datax_header(1, FLAG_END, b"\x01s\x01c", 10), nop_frame(2)], "not the last frame"),
        ([datax_header(1, FLAG_END, b"\x01s\x01c", 0)], "empty payload"),
        ([datax_header(1, 0x80, b"\x01s\x01c", 10)], "unknown DATA flags"),
    ],
)
def test_malformed_datax_is_refused(parts: list[bytes], match: str) -> None:
    with pytest.raises(WireError, match=match):
        parse_message(encode_message(0, parts))
