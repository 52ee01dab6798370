"""The wire codec: exact round trips, strict limits, and only CodecError from bad bytes."""

from __future__ import annotations

import secrets
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from p2pboost.codec import DEFAULT_LIMITS, FORMAT_VERSION, ExtCode, Limits, decode, encode
from p2pboost.crypto.paillier import CiphertextBatch, PublicKey, generate_keypair
from p2pboost.exceptions import CodecError, InputError

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "<i2",
    "<u2",
    "<i4",
    "<u4",
    "<i8",
    "<u8",
    "<f4",
    "<f8",
    ">i4",
    ">f8",
]


@pytest.fixture(scope="module")
def public_key() -> PublicKey:
    return generate_keypair(1024, allow_insecure=True)[0]


def _same(a: Any, b: Any) -> bool:
    """Equality that treats arrays by dtype, shape and bytes (NaN == NaN) and tuples as lists."""
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=")
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, list | tuple):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return type(a) is type(b) and a == b


arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(
        np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
    )
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
)


def _batches(public_key: PublicKey) -> st.SearchStrategy[CiphertextBatch]:
    width = public_key.ciphertext_bytes
    values = st.lists(st.integers(1, int(public_key.n2) - 1), max_size=6)
    return values.map(
        lambda vs: CiphertextBatch(
            public_key.fingerprint, width, b"".join(v.to_bytes(width, "big") for v in vs)
        )
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(public_key: PublicKey, data: st.DataObject) -> None:
    leaves = scalars | arrays | _batches(public_key) | st.just(public_key)
    tree = st.recursive(
        leaves,
        lambda kids: (
            st.lists(kids, max_size=4)
            | st.dictionaries(st.text(max_size=5) | st.integers(-5, 5), kids, max_size=4)
        ),
        max_leaves=10,
    )
    obj = data.draw(tree)
    out = decode(encode(obj))
    assert _same(obj, out)


@settings(max_examples=40, deadline=None)
@given(arr=arrays)
def test_array_round_trip(arr: np.ndarray) -> None:
    out = decode(encode(arr))
    assert isinstance(out, np.ndarray)
    assert _same(arr, out)
    assert not out.flags.writeable  # a view of the received bytes


def test_ciphertext_batch_is_one_ext_of_fixed_width_blocks(public_key: PublicKey) -> None:
    width = public_key.ciphertext_bytes
    batch = CiphertextBatch(public_key.fingerprint, width, secrets.token_bytes(width * 100))
    data = encode(batch)
    assert data[0] == FORMAT_VERSION
    overhead = len(data) - 100 * width
    assert overhead <= 1 + 6 + 16 + 4  # version, ext header, fingerprint, width
    assert decode(data) == batch


def test_public_key_round_trip_and_minimum_size(public_key: PublicKey) -> None:
    assert decode(encode({"pk": public_key})) == {"pk": public_key}
    with pytest.raises(CodecError, match="bits"):
        decode(encode(public_key), limits=Limits(min_key_bits=2048))


def test_encode_refuses_what_it_cannot_represent() -> None:
    for bad in (
        object(),
        np.array([object()]),
        np.zeros(2, dtype=np.complex128),
        2**70,
        {1.5: 1}.keys(),
    ):
        with pytest.raises(InputError):
            encode(bad)


def _raw(obj: Any) -> bytes:
    return bytes((FORMAT_VERSION,)) + msgpack.packb(obj, use_bin_type=True)


def _ext(code: int, payload: bytes) -> bytes:
    return _raw(msgpack.ExtType(code, payload))


def _array_payload(code: int, shape: tuple[int, ...], body: bytes) -> bytes:
    return bytes((code, len(shape))) + b"".join(d.to_bytes(8, "big") for d in shape) + body


@pytest.mark.parametrize(
    ("data", "limits", "match"),
    [
        (b"", DEFAULT_LIMITS, "short"),
        (bytes((FORMAT_VERSION + 1,)) + msgpack.packb(1), DEFAULT_LIMITS, "version"),
        (_raw(list(range(100))), Limits(max_message_bytes=50), "exceeds"),
        (_raw([[[[1]]]]), Limits(max_depth=3), "deep"),
        (_raw([[1, 2], [3, 4]]), Limits(max_elements=5), "elements"),
        (_raw(list(range(10))), Limits(max_container_len=5), ""),
        (_raw("x" * 100), Limits(max_str_bytes=10), ""),
        (_raw({b"k": 1}), DEFAULT_LIMITS, "keys"),
        (_raw({1.5: 1}), DEFAULT_LIMITS, "keys"),
        (_raw({True: 1}), DEFAULT_LIMITS, "keys"),
        (bytes((FORMAT_VERSION,)) + b"\x82\xa1a\x01\xa1a\x02", DEFAULT_LIMITS, "duplicate"),
        (_raw(1) + b"\x01", DEFAULT_LIMITS, ""),  # trailing bytes
        (_ext(99, b"x"), DEFAULT_LIMITS, "unknown ext"),
        (_ext(ExtCode.NDARRAY, b"\x07"), DEFAULT_LIMITS, "truncated"),
        (_ext(ExtCode.NDARRAY, _array_payload(42, (1,), b"\0")), DEFAULT_LIMITS, "dtype"),
        (_ext(ExtCode.NDARRAY, _array_payload(7, (3,), b"\0" * 23)), DEFAULT_LIMITS, "length"),
        (
            _ext(ExtCode.NDARRAY, _array_payload(7, (2**40, 2**40), b"")),
            DEFAULT_LIMITS,
            "too many elements",
        ),
        (
            _ext(ExtCode.NDARRAY, _array_payload(7, (1,) * 9, b"\0" * 8)),
            DEFAULT_LIMITS,
            "dimensions",
        ),
        (_ext(ExtCode.NDARRAY, _array_payload(0, (2,), b"\x01\x02")), DEFAULT_LIMITS, "boolean"),
        (_ext(ExtCode.CIPHERTEXTS, b"\0" * 10), DEFAULT_LIMITS, "truncated"),
        (
            _ext(ExtCode.CIPHERTEXTS, b"\0" * 16 + (257).to_bytes(4, "big") + b"\0" * 257),
            DEFAULT_LIMITS,
            "width",
        ),
        (
            _ext(ExtCode.CIPHERTEXTS, b"\0" * 16 + (256).to_bytes(4, "big") + b"\0" * 300),
            DEFAULT_LIMITS,
            "whole",
        ),
        (
            _ext(ExtCode.CIPHERTEXTS, b"\0" * 16 + (256).to_bytes(4, "big") + b"\0" * 512),
            Limits(max_ciphertexts=1),
            "large",
        ),
        (_ext(ExtCode.PUBLIC_KEY, b"\x00"), DEFAULT_LIMITS, "truncated"),
        (
            _ext(ExtCode.PUBLIC_KEY, b"\x00\x80" + b"\xff" * 384),
            DEFAULT_LIMITS,
            "invalid public key",
        ),
        (_ext(ExtCode.PUBLIC_KEY, b"\x00\x10" + b"\xff" * 48), DEFAULT_LIMITS, "bits"),
    ],
)
def test_malformed_input_raises_codec_error(data: bytes, limits: Limits, match: str) -> None:
    with pytest.raises(CodecError, match=match or None):
        decode(data, limits=limits)


def _valid_messages(public_key: PublicKey) -> list[bytes]:
    width = public_key.ciphertext_bytes
    batch = CiphertextBatch(public_key.fingerprint, width, (12345).to_bytes(width, "big") * 3)
    return [
        encode({"type": "hist", "node": 3, "bins": np.arange(12, dtype=np.uint16).reshape(3, 4)}),
        encode(
            [batch, public_key, {"ids": np.array([1, 2], dtype=np.uint64), "x": [1.5, None, True]}]
        ),
    ]


def _decode_only_codec_errors(data: bytes) -> None:
    try:
        decode(
            data, limits=Limits(max_elements=1000, max_array_elements=10_000, max_ciphertexts=100)
        )
    except CodecError:
        pass


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decode_only_codec_errors(data)
    _decode_only_codec_errors(bytes((FORMAT_VERSION,)) + data)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzz_truncated_and_mutated_messages(public_key: PublicKey, data: st.DataObject) -> None:
    message = bytearray(data.draw(st.sampled_from(_valid_messages(public_key))))
    cut = data.draw(st.integers(0, len(message)))
    _decode_only_codec_errors(bytes(message[:cut]))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(message) - 1))
        message[pos] = data.draw(st.integers(0, 255))
    _decode_only_codec_errors(bytes(message))


def test_batch_binding_after_decode(public_key: PublicKey) -> None:
    """decode checks shape only; binding to the key checks fingerprint and range."""
    width = public_key.ciphertext_bytes
    batch = decode(encode(CiphertextBatch(public_key.fingerprint, width, b"\xff" * width)))
    assert isinstance(batch, CiphertextBatch)
    with pytest.raises(CodecError):
        batch.ciphertexts(public_key)


def test_nesting_bomb_is_rejected() -> None:
    with pytest.raises(CodecError):
        decode(bytes((FORMAT_VERSION,)) + b"\x91" * 100_000 + b"\xc0")


def test_declared_sizes_beyond_the_data_are_rejected() -> None:
    huge_array = bytes((FORMAT_VERSION,)) + b"\xdd\xff\xff\xff\xff"  # array32 of 2**32-1 items
    huge_ext = bytes((FORMAT_VERSION,)) + b"\xc9\x7f\xff\xff\xff\x01"  # ext32 of 2 GiB
    for data in (huge_array, huge_ext):
        with pytest.raises(CodecError):
            decode(data)
