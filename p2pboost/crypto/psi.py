"""Diffie-Hellman private set intersection over Curve25519 (the math, no I/O).

Each id is hashed with a domain tag to 32 bytes and read as an X25519 u-coordinate ``H(x)``.
X25519 scalar multiplication commutes on u-coordinates, ``X(a, X(b, u)) == X(b, X(a, u))``, so
with the guest's secret ``a`` and the host's secret ``b``:

1. the guest sends ``X(a, H(x))`` for its ids; the host returns them as ``X(b, X(a, H(x)))``;
2. the host sends ``X(b, H(y))`` for its ids; the guest turns them into ``X(a, X(b, H(y)))``;
3. equal doubly-blinded values are equal ids. Neither side can un-blind the other's values
   (that would be a discrete logarithm), so each learns only the intersection and the other's
   set size.

Scalar multiplication is ``X25519PrivateKey.exchange`` from ``cryptography`` (constant time,
OpenSSL). It refuses the handful of low-order points (all-zero output); a SHA-256 output hits
one with negligible probability, and we surface it as :class:`CryptoError` rather than skip an
id silently. Batches travel between processes as one ``bytes`` blob of 32-byte points, so a
process pool pays one pickle per batch rather than one per id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from p2pboost.exceptions import CryptoError, InputError

__all__ = [
    "POINT_BYTES",
    "PsiKey",
    "blind_blob",
    "hash_ids",
    "intersect_positions",
    "split_blob",
]

POINT_BYTES = 32
#: Domain separation: hashes of ids for PSI never collide with any other use of SHA-256 here.
_DOMAIN = b"p2pboost/psi/x25519/v1\x00"


def _id_bytes(sample_id: str | bytes | int) -> bytes:
    """A canonical, type-tagged byte form, so the int 1 and the string "1" stay distinct."""
    if isinstance(sample_id, bool):
        raise InputError("ids must be str, bytes or int, not bool")
    if isinstance(sample_id, int):
        return b"i" + str(sample_id).encode("ascii")
    if isinstance(sample_id, str):
        return b"s" + sample_id.encode("utf-8")
    if isinstance(sample_id, bytes):
        return b"b" + sample_id
    raise InputError(f"ids must be str, bytes or int, not {type(sample_id).__name__}")


def hash_ids(ids: Iterable[str | bytes | int]) -> bytes:
    """Hash every id to a 32-byte u-coordinate; returns the points as one blob."""
    out = bytearray()
    for sample_id in ids:
        out += hashlib.sha256(_DOMAIN + _id_bytes(sample_id)).digest()
    return bytes(out)


def split_blob(blob: bytes) -> list[bytes]:
    """Cut a blob of points into 32-byte points (raises if the length is not a multiple)."""
    if len(blob) % POINT_BYTES:
        raise CryptoError(f"a point blob must be a multiple of {POINT_BYTES} bytes long")
    view = memoryview(blob)
    return [bytes(view[i : i + POINT_BYTES]) for i in range(0, len(blob), POINT_BYTES)]


def blind_blob(private_bytes: bytes, blob: bytes) -> bytes:
    """Multiply every point in ``blob`` by the secret scalar; a module-level function so it can
    run in a process pool."""
    key = X25519PrivateKey.from_private_bytes(private_bytes)
    exchange = key.exchange
    from_bytes = X25519PublicKey.from_public_bytes
    if len(blob) % POINT_BYTES:
        raise CryptoError(f"a point blob must be a multiple of {POINT_BYTES} bytes long")
    out = bytearray(len(blob))
    view = memoryview(blob)
    try:
        for i in range(0, len(blob), POINT_BYTES):
            out[i : i + POINT_BYTES] = exchange(from_bytes(view[i : i + POINT_BYTES].tobytes()))
    except ValueError as exc:  # a low-order point: all-zero shared secret
        raise CryptoError(f"point at offset {i} is of low order") from exc
    return bytes(out)


@dataclass(frozen=True, slots=True)
class PsiKey:
    """One party's secret scalar for one PSI run. Never reuse it across runs."""

    private_bytes: bytes

    @classmethod
    def generate(cls) -> PsiKey:
        key = X25519PrivateKey.generate()
        raw = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return cls(raw)

    def blind(self, blob: bytes) -> bytes:
        """Blind a blob of points in this process (use a pool for large sets)."""
        return blind_blob(self.private_bytes, blob)

    def __repr__(self) -> str:  # never print the secret
        return "PsiKey(<secret>)"


def intersect_positions(
    mine: Sequence[bytes], theirs: Sequence[bytes]
) -> tuple[list[int], list[int]]:
    """Positions of the common doubly-blinded values: (indices into mine, indices into theirs),
    ordered by ``mine``. Duplicated values in either input are an error: ids must be unique."""
    index_theirs: dict[bytes, int] = {}
    for j, point in enumerate(theirs):
        if index_theirs.setdefault(point, j) != j:
            raise InputError("the other party's blinded ids contain a duplicate")
    seen: set[bytes] = set()
    mine_pos: list[int] = []
    theirs_pos: list[int] = []
    for i, point in enumerate(mine):
        if point in seen:
            raise InputError("ids must be unique; found a duplicate")
        seen.add(point)
        match = index_theirs.get(point)
        if match is not None:
            mine_pos.append(i)
            theirs_pos.append(match)
    return mine_pos, theirs_pos
