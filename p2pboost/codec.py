"""The wire format: one version byte, then msgpack with five ExtTypes.

Every message payload between parties goes through :func:`encode` / :func:`decode`. Bytes from a
peer are untrusted, so the decoder

* checks sizes *before* anything is allocated from them (message, strings, containers, exts,
  array shapes), counts every container element as it is built, and bounds the nesting depth;
* accepts only ``str`` and ``int`` map keys and no duplicate keys;
* never unpickles: numpy arrays travel as (whitelisted dtype, shape, raw little-endian bytes);
* raises :class:`~p2pboost.exceptions.CodecError` and nothing else on malformed input.

ExtTypes (payloads are big-endian where they hold integers):

=====  ===================  ====================================================================
code   Python type          payload
=====  ===================  ====================================================================
1      ``numpy.ndarray``    ``u8 dtype code, u8 ndim, ndim x u64 dims, raw C-order bytes``
2      CiphertextBatch      ``16-byte key fingerprint, u32 block width, blocks`` (one ext for a
                            whole batch: a ciphertext costs exactly ``2 * key_bytes`` bytes)
3      PublicKey            ``PublicKey.to_bytes()`` (``u16 key_bytes, n, hs``)
4      CiphertextBatch      an Okamoto-Uchiyama batch: same layout as code 2, blocks of
       (scheme ``"ou"``)    ``key_bytes`` (values below ``n``)
5      OUPublicKey          ``OUPublicKey.to_bytes()`` (``u16 key_bytes, n, g, h``)
=====  ===================  ====================================================================

A decoded :class:`~p2pboost.crypto.additive.CiphertextBatch` is *unbound*: its shape is checked
but its numbers are not compared with any modulus yet. ``batch.ciphertexts(public_key)`` binds
it, raising :class:`~p2pboost.exceptions.KeyMismatchError` for a foreign key (or the other
scheme) and :class:`CodecError` for a value outside ``(0, modulus)``. Decoded arrays are
read-only views of the received bytes (no copy); call ``.copy()`` to modify one.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from p2pboost.crypto.additive import MAX_KEY_BITS, MIN_KEY_BITS, CiphertextBatch
from p2pboost.crypto.ou import OUPublicKey
from p2pboost.crypto.paillier import PublicKey
from p2pboost.exceptions import CodecError, InputError

__all__ = ["DEFAULT_LIMITS", "FORMAT_VERSION", "ExtCode", "Limits", "decode", "encode"]

#: First byte of every message; bumped on any incompatible change of the format. It must stay
#: below 128 (a msgpack positive fixint encodes as exactly this byte; see :func:`encode`).
FORMAT_VERSION = 1


class ExtCode:
    """msgpack ExtType codes used by p2pboost."""

    NDARRAY = 1
    CIPHERTEXTS = 2
    PUBLIC_KEY = 3
    OU_CIPHERTEXTS = 4
    OU_PUBLIC_KEY = 5


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds the decoder enforces; everything beyond them is a :class:`CodecError`.

    ``max_elements`` counts every list item and map entry in the message (not array elements,
    which are bounded by ``max_array_elements`` per array). ``min_key_bits`` is 1024: a key is
    its owner's protection of its own data, and the owner chooses its size explicitly.
    """

    max_message_bytes: int = 256 * 1024 * 1024
    max_elements: int = 1_000_000
    max_container_len: int = 1_000_000
    max_str_bytes: int = 1024 * 1024
    max_ext_bytes: int = 256 * 1024 * 1024
    max_depth: int = 32
    max_array_elements: int = 64 * 1024 * 1024
    max_array_ndim: int = 8
    max_ciphertexts: int = 1_000_000
    min_key_bits: int = MIN_KEY_BITS
    max_key_bits: int = MAX_KEY_BITS


DEFAULT_LIMITS = Limits()

# Whitelisted dtypes: code <-> little-endian numpy dtype. Never "object", never pickle.
_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(s)
    for s in ("|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8")
)
_DTYPE_CODE = {dt: code for code, dt in enumerate(_DTYPES)}
_BATCH_HEADER = struct.Struct(">16sI")
_U64 = struct.Struct(">Q")


# --- encoding ---------------------------------------------------------------------------------
def _encode_ndarray(arr: np.ndarray[Any, Any]) -> msgpack.ExtType:
    dtype = arr.dtype.newbyteorder("<")  # the wire is little-endian whatever the host is
    code = _DTYPE_CODE.get(dtype)
    if code is None:
        raise InputError(f"numpy dtype {arr.dtype} cannot be sent (whitelist: bool, ints, floats)")
    data = arr.astype(dtype, order="C", copy=False)  # (ascontiguousarray would make 0-d 1-d)
    header = bytes((code, data.ndim)) + b"".join(_U64.pack(d) for d in data.shape)
    # One copy of the array's bytes (join reads the buffer directly), not two.
    return msgpack.ExtType(
        ExtCode.NDARRAY, b"".join((header, data.reshape(-1).view(np.uint8).data))
    )


def _default(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        return _encode_ndarray(obj)
    if isinstance(obj, CiphertextBatch):
        code = ExtCode.OU_CIPHERTEXTS if obj.scheme == "ou" else ExtCode.CIPHERTEXTS
        return msgpack.ExtType(code, _BATCH_HEADER.pack(obj.fingerprint, obj.width) + obj.data)
    if isinstance(obj, PublicKey):
        return msgpack.ExtType(ExtCode.PUBLIC_KEY, obj.to_bytes())
    if isinstance(obj, OUPublicKey):
        return msgpack.ExtType(ExtCode.OU_PUBLIC_KEY, obj.to_bytes())
    if isinstance(obj, np.generic):  # numpy scalars travel as plain msgpack numbers
        return obj.item()
    raise InputError(f"cannot encode objects of type {type(obj).__name__}")


def encode(obj: object) -> bytes:
    """Serialise ``obj``: ``None``, bool, int (64-bit), float, str, bytes, list/tuple, dict
    (``str``/``int`` keys), ``numpy.ndarray``, :class:`CiphertextBatch`, :class:`PublicKey`,
    :class:`OUPublicKey`.

    Tuples come back as lists. Raises :class:`InputError` for anything else.
    """
    # The version byte is packed as a msgpack positive fixint, which is that very byte, so the
    # message is built in one buffer instead of being copied again to prepend it.
    packer = msgpack.Packer(default=_default, use_bin_type=True, autoreset=False)
    try:
        packer.pack(FORMAT_VERSION)
        packer.pack(obj)
    except InputError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"cannot encode message: {exc}") from exc
    packed: bytes = packer.bytes()
    return packed


# --- decoding ---------------------------------------------------------------------------------
class _Decoder:
    """One decoding pass: hooks that count and validate as msgpack builds objects."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.elements = 0

    def _count(self, n: int) -> None:
        self.elements += n
        if self.elements > self.limits.max_elements:
            raise CodecError("message has too many elements")

    def list_hook(self, items: list[Any]) -> list[Any]:
        self._count(len(items))
        return items

    def pairs_hook(self, pairs: list[tuple[Any, Any]]) -> dict[str | int, Any]:
        self._count(len(pairs))
        out: dict[str | int, Any] = {}
        for key, value in pairs:
            if type(key) is not str and type(key) is not int:
                raise CodecError("map keys must be str or int")
            if key in out:
                raise CodecError("duplicate map key")
            out[key] = value
        return out

    def ext_hook(self, code: int, data: bytes) -> object:
        if code == ExtCode.NDARRAY:
            return self._ndarray(data)
        if code == ExtCode.CIPHERTEXTS:
            return self._batch(data, "paillier")
        if code == ExtCode.PUBLIC_KEY:
            return self._public_key(data, PublicKey)
        if code == ExtCode.OU_CIPHERTEXTS:
            return self._batch(data, "ou")
        if code == ExtCode.OU_PUBLIC_KEY:
            return self._public_key(data, OUPublicKey)
        raise CodecError(f"unknown ext type {code}")

    def _ndarray(self, data: bytes) -> np.ndarray[Any, Any]:
        if len(data) < 2:
            raise CodecError("array header truncated")
        code, ndim = data[0], data[1]
        if code >= len(_DTYPES):
            raise CodecError(f"array dtype code {code} not allowed")
        if ndim > self.limits.max_array_ndim:
            raise CodecError("array has too many dimensions")
        offset = 2 + 8 * ndim
        if len(data) < offset:
            raise CodecError("array shape truncated")
        shape = tuple(_U64.unpack_from(data, 2 + 8 * i)[0] for i in range(ndim))
        count = math.prod(shape)  # exact Python int: no overflow
        if count > self.limits.max_array_elements:
            raise CodecError("array has too many elements")
        dtype = _DTYPES[code]
        if len(data) - offset != count * dtype.itemsize:
            raise CodecError("array byte length does not match its shape")
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
        if dtype == np.bool_ and arr.size and int(arr.view(np.uint8).max()) > 1:
            raise CodecError("boolean array holds values other than 0 and 1")
        return arr

    def _batch(self, data: bytes, scheme: str) -> CiphertextBatch:
        if len(data) < _BATCH_HEADER.size:
            raise CodecError("ciphertext batch header truncated")
        fingerprint, width = _BATCH_HEADER.unpack_from(data)
        limits = self.limits
        # A Paillier block holds a value below n**2 (2 * key_bytes), an OU block one below n.
        per_key_byte = 2 if scheme == "paillier" else 1
        low, high = per_key_byte * limits.min_key_bits // 8, per_key_byte * limits.max_key_bits // 8
        if width % per_key_byte or not low <= width <= high:
            raise CodecError(f"ciphertext block width {width} outside the key size limits")
        body = data[_BATCH_HEADER.size :]
        if len(body) % width:
            raise CodecError("ciphertext batch is not a whole number of blocks")
        if len(body) // width > limits.max_ciphertexts:
            raise CodecError("ciphertext batch too large")
        return CiphertextBatch(fingerprint, width, body, scheme)

    def _public_key(
        self, data: bytes, cls: type[PublicKey] | type[OUPublicKey]
    ) -> PublicKey | OUPublicKey:
        if len(data) < 2:
            raise CodecError("public key truncated")
        bits = 8 * int.from_bytes(data[:2], "big")
        if not self.limits.min_key_bits <= bits <= self.limits.max_key_bits:
            raise CodecError(f"public key of {bits} bits outside the accepted sizes")
        try:
            return cls.from_bytes(data)
        except InputError as exc:
            raise CodecError(f"invalid public key: {exc}") from exc


def _check_depth(obj: object, max_depth: int) -> None:
    """Iterative walk (no recursion limit to hit) rejecting nesting deeper than ``max_depth``."""
    stack: list[tuple[object, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list):
            children: Any = item
        elif isinstance(item, dict):
            children = item.values()
        else:
            continue
        if depth >= max_depth:
            raise CodecError("message nested too deeply")
        stack.extend((child, depth + 1) for child in children if isinstance(child, list | dict))


def decode(data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS) -> object:
    """Parse a message made by :func:`encode`; raise :class:`CodecError` and nothing else."""
    try:
        view = memoryview(data)
        size = view.nbytes
        if size > limits.max_message_bytes:
            raise CodecError(f"message of {size} bytes exceeds {limits.max_message_bytes}")
        if size < 2:
            raise CodecError("message too short")
        if view[0] != FORMAT_VERSION:
            raise CodecError(f"unsupported format version {view[0]}")
        decoder = _Decoder(limits)
        obj = msgpack.unpackb(
            view[1:],
            raw=False,
            use_list=True,
            strict_map_key=False,  # our pairs_hook is stricter: str or int only
            list_hook=decoder.list_hook,
            object_pairs_hook=decoder.pairs_hook,
            ext_hook=decoder.ext_hook,
            max_str_len=limits.max_str_bytes,
            max_bin_len=limits.max_ext_bytes,
            max_array_len=limits.max_container_len,
            max_map_len=limits.max_container_len,
            max_ext_len=limits.max_ext_bytes,
        )
        _check_depth(obj, limits.max_depth)
    except CodecError:
        raise
    except Exception as exc:  # msgpack, numpy, struct, unicode: all malformed input
        raise CodecError(f"malformed message: {type(exc).__name__}: {exc}") from exc
    return obj
