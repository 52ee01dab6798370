"""Batch encryption of plaintexts to ciphertext bytes, with the kernel of the process.

An *encryptor* turns a batch of plaintext integers into ciphertexts as fixed-width big-endian
bytes (what the wire carries), using the key's fixed-base tables: ``encrypt(plaintexts,
factors)`` (with randomisers made ahead of time for the first ``len(factors) // width``
values) and ``factors(count)`` (randomisers: encryptions of zero). :func:`make_encryptor`
gives the native one (:class:`NativeOUEncryptor`, :class:`NativePaillierEncryptor`: the
table products in C, the key owner's halves recombined by CRT in C) when the native kernel is
active, else :class:`TableEncryptor` over the gmpy2 tables of :mod:`p2pboost.crypto.ou` and
:mod:`p2pboost.crypto.paillier`. Both draw the same distributions and give ciphertexts that
decrypt alike; they differ in speed only.

**The key owner's shortcut (OU).** With the key structure of Coron, Naccache and Paillier
(``p - 1 = t u``, ``g`` raised to ``u``), ``h = g**n`` has order dividing ``t`` modulo
``p**2``, so ``h**r = h**(r mod t)`` there: the owner's table for that half needs
``|t| = 2 lambda`` bits of exponent instead of ``4 lambda`` (half the products). The
ciphertext is the same ``g**m h**r mod n`` for the same ``r``; only the owner, who knows ``t``,
can take the shortcut. See docs/explanation/ou.md for the exponent's security argument.

**Side channels.** The Montgomery products are constant-time (no data-dependent branch; the
final subtraction is a conditional swap); the table lookups are indexed by the digits of the
random exponent, as in every fixed-base method, so a process sharing the CPU's caches could
learn something of a ciphertext's randomness. The secret exponent of decryption never indexes
a table (``mpz_powm_sec``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import (
    CRT_WINDOW_BITS,
    TABLE_MEMORY_BUDGET,
    WINDOW_BITS,
    CiphertextBatch,
)
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, AnyTable, make_table
from p2pboost.crypto.ou import OUPrivateKey, OUPublicKey
from p2pboost.crypto.paillier import PrivateKey, PublicKey
from p2pboost.crypto.residues import Residues
from p2pboost.exceptions import InputError, KeyMismatchError

__all__ = [
    "Encryptor",
    "NativeOUEncryptor",
    "NativePaillierEncryptor",
    "TableEncryptor",
    "make_encryptor",
]


class Encryptor(Protocol):
    """What the engine's workers need to encrypt (either kernel)."""

    def encrypt(self, plaintexts: Sequence[int], factors: bytes = b"") -> bytes: ...

    def factors(self, count: int) -> bytes: ...


def make_encryptor(public_key: AnyPublicKey, private_key: AnyPrivateKey | None = None) -> Encryptor:
    """The encryptor of the process' kernel for ``public_key`` (CRT tables with its
    ``private_key``)."""
    if private_key is not None and private_key.public_key != public_key:
        raise KeyMismatchError("private key does not belong to the public key")
    if kernels.active() == "native":
        if isinstance(public_key, OUPublicKey):
            assert private_key is None or isinstance(private_key, OUPrivateKey)
            return NativeOUEncryptor(public_key, private_key)
        assert private_key is None or isinstance(private_key, PrivateKey)
        return NativePaillierEncryptor(public_key, private_key)
    return TableEncryptor(public_key, make_table(public_key, private_key))


class TableEncryptor:
    """The gmpy2 path: the schemes' own fixed-base tables, serialised to bytes."""

    def __init__(self, public_key: AnyPublicKey, table: AnyTable) -> None:
        self.public_key = public_key
        self.table = table

    def _pk(self) -> AnyPublicKey:
        return self.public_key

    def encrypt(self, plaintexts: Sequence[int], factors: bytes = b"") -> bytes:
        pk = self._pk()
        if not factors:
            cts = self.table.encrypt_many(plaintexts)
        else:
            stashed = CiphertextBatch.of(pk, factors).ciphertexts(pk)
            k = len(stashed)
            if k > len(plaintexts):
                raise InputError("more randomisers than plaintexts")
            cts = self.table.encrypt_with_factors(plaintexts[:k], stashed)
            cts += self.table.encrypt_many(plaintexts[k:])
        return CiphertextBatch.from_ciphertexts(pk, cts).data

    def factors(self, count: int) -> bytes:
        pk = self._pk()
        return CiphertextBatch.from_ciphertexts(pk, self.table.random_factors(count)).data


# --- native ---------------------------------------------------------------------------------
def _le(values: Sequence[int], width: int) -> bytes:
    return b"".join(int(v).to_bytes(width, "little") for v in values)


def _random_exponents(count: int, bits: int) -> list[int]:
    """``count`` uniform exponents in ``[0, 2**bits)`` from ``os.urandom``."""
    nbytes = -(-bits // 8)
    raw = os.urandom(count * nbytes)
    mask = (1 << bits) - 1
    return [
        int.from_bytes(raw[i : i + nbytes], "little") & mask for i in range(0, len(raw), nbytes)
    ]


def _window(entry_bytes: int, exponent_bits: int, budget: int) -> int:
    """The widest window up to :data:`CRT_WINDOW_BITS` whose table fits ``budget`` bytes."""
    for w in range(CRT_WINDOW_BITS, WINDOW_BITS, -1):
        if -(-exponent_bits // w) * (1 << w) * entry_bytes <= budget:
            return w
    return WINDOW_BITS


class _Tables:
    """A native fixed-base table of one base modulo one modulus, rebuilt wider on demand.

    The table objects are immutable (a task on another thread may be reading one while the
    GIL is released); a wider one replaces the reference, under a lock, so that two threads
    never install a narrower table over a wider one."""

    def __init__(self, base: int, mod: int, w: int, bits: int) -> None:
        self.base, self.mod, self.w = int(base) % int(mod), int(mod), w
        self.modulus = kernels.native_modulus(self.mod)
        self._lock = threading.Lock()
        self._current: tuple[int, Any] = (0, None)
        self.upto(bits)

    @property
    def table(self) -> Any:
        return self._current[1]

    def upto(self, bits: int) -> Any:
        have, table = self._current
        if bits <= have:
            return table
        with self._lock:
            have, table = self._current
            if bits > have:
                windows = max(1, -(-bits // self.w))
                width = self.modulus.width
                table = kernels._native.FixedBase(
                    self.modulus, self.base.to_bytes(width, "big"), self.w, windows
                )
                self._current = (windows * self.w, table)
            return table


def _entry_bytes(mod: int) -> int:
    return 8 * -(-int(mod).bit_length() // 64)


class _Moduli:
    """What a native encryptor computes modulo: the ciphertext modulus ``whole``, or the key
    owner's two coprime ``halves`` (recombined by CRT into ``width``-byte ciphertexts)."""

    def __init__(self, whole: int, halves: tuple[int, int] | None, width: int) -> None:
        self.width = width
        if halves is None:
            self.values = [whole]
            self.inverse = b""
        else:
            a, b = halves
            self.values = [a, b]
            self.inverse = pow(a, -1, b).to_bytes(_entry_bytes(b), "big")

    def combine(self, parts: list[bytes]) -> bytes:
        """The ciphertexts from one residue buffer per modulus."""
        if len(parts) == 1:
            return parts[0]
        m1, m2 = (kernels.native_modulus(m) for m in self.values)
        return bytes(kernels._native.crt(parts[0], parts[1], m1, m2, self.inverse, self.width))


def _stashed(count: int, factors: bytes, width: int) -> int:
    """How many of ``count`` plaintexts take one of the randomisers ``factors``."""
    k = len(factors) // width
    if len(factors) % width or k > count:
        raise InputError("randomisers must be whole ciphertexts, at most one per plaintext")
    return k


class NativeOUEncryptor:
    """``g**m h**r mod n`` with the native kernel; the key owner works modulo ``p**2`` and
    ``q`` and recombines by CRT (taking ``r mod t`` for the ``p**2`` half when the key has
    the fast-decryption structure)."""

    def __init__(self, public_key: OUPublicKey, private_key: OUPrivateKey | None = None) -> None:
        self.public_key = public_key
        self.width = public_key.ciphertext_bytes
        self.exponent_bits = public_key.exponent_bits
        self.plain_bits = public_key.plaintext_bits
        t = getattr(private_key, "t", None) if private_key is not None else None
        self.t = int(t) if t else None
        halves = None if private_key is None else (int(private_key.psquare), int(private_key.q))
        self.crt = _Moduli(int(public_key.n), halves, self.width)
        self.moduli = self.crt.values
        bits = [self.exponent_bits] * len(self.moduli)
        if self.t is not None:
            bits[0] = self.t.bit_length()
        budget = TABLE_MEMORY_BUDGET // 2 // len(self.moduli)
        self.h = [
            _Tables(public_key.h, mod, _window(_entry_bytes(mod), b, budget), b)
            for mod, b in zip(self.moduli, bits, strict=True)
        ]
        self.g = [
            _Tables(public_key.g, mod, h.w, h.w) for mod, h in zip(self.moduli, self.h, strict=True)
        ]

    def _plain(self, plaintexts: Sequence[int]) -> tuple[bytes, int]:
        top = 0
        for m in plaintexts:
            if m < 0 or m >> self.plain_bits:
                raise InputError(f"plaintext outside [0, 2**{self.plain_bits})")
            top = max(top, int(m).bit_length())
        width = max(1, -(-top // 8))
        return _le(plaintexts, width), 8 * width

    def _randomness(self, count: int) -> list[bytes]:
        rs = _random_exponents(count, self.exponent_bits)
        width = -(-self.exponent_bits // 8)
        out = []
        for k in range(len(self.moduli)):
            if k == 0 and self.t is not None:
                t = self.t
                tw = -(-t.bit_length() // 8)
                out.append(b"".join((r % t).to_bytes(tw, "little") for r in rs))
            else:
                out.append(_le(rs, width))
        return out

    def _products(
        self, count: int, g_exps: bytes | None, g_bits: int, r_exps: list[bytes] | None
    ) -> bytes:
        native = kernels._native
        parts = []
        for k in range(len(self.moduli)):
            tables: list[Any] = []
            exps: list[bytes] = []
            if g_exps is not None:
                tables.append(self.g[k].upto(g_bits))
                exps.append(g_exps)
            if r_exps is not None:
                tables.append(self.h[k].table)
                exps.append(r_exps[k])
            parts.append(bytes(native.fixed_base(tuple(tables), tuple(exps), count)))
        return self.crt.combine(parts)

    def encrypt(self, plaintexts: Sequence[int], factors: bytes = b"") -> bytes:
        count = len(plaintexts)
        if not count:
            return b""
        k = _stashed(count, factors, self.width)
        out = []
        if k:
            m, bits = self._plain(plaintexts[:k])
            gm = self._products(k, m, bits, None)
            out.append(
                kernels.multiply(
                    self.public_key.n,
                    Residues.of_bytes(gm, self.width),
                    Residues.of_bytes(factors, self.width),
                ).data
            )
        if k < count:
            rest = plaintexts[k:]
            m, bits = self._plain(rest)
            out.append(self._products(len(rest), m, bits, self._randomness(len(rest))))
        return b"".join(out)

    def factors(self, count: int) -> bytes:
        if count <= 0:
            return b""
        return self._products(count, None, 0, self._randomness(count))


class NativePaillierEncryptor:
    """``(1 + m n) hs**a mod n**2`` with the native kernel; the key owner's ``hs**a`` is made
    modulo ``p**2`` and ``q**2`` and recombined by CRT."""

    def __init__(self, public_key: PublicKey, private_key: PrivateKey | None = None) -> None:
        self.public_key = public_key
        self.width = public_key.ciphertext_bytes
        self.key_bytes = public_key.key_bytes
        self.exponent_bits = public_key.exponent_bits
        n2 = int(public_key.n2)
        self.n2_modulus = kernels.native_modulus(n2)
        self.n_be = int(public_key.n).to_bytes(self.key_bytes, "big")
        halves = (
            None if private_key is None else (int(private_key.psquare), int(private_key.qsquare))
        )
        self.crt = _Moduli(n2, halves, self.width)
        self.moduli = self.crt.values
        budget = TABLE_MEMORY_BUDGET // len(self.moduli)
        self.hs = [
            _Tables(
                public_key.hs,
                mod,
                _window(_entry_bytes(mod), self.exponent_bits, budget)
                if private_key
                else WINDOW_BITS,
                self.exponent_bits,
            )
            for mod in self.moduli
        ]

    def factors(self, count: int) -> bytes:
        if count <= 0:
            return b""
        rs = _le(_random_exponents(count, self.exponent_bits), -(-self.exponent_bits // 8))
        native = kernels._native
        return self.crt.combine(
            [bytes(native.fixed_base((t.table,), (rs,), count)) for t in self.hs]
        )

    def encrypt(self, plaintexts: Sequence[int], factors: bytes = b"") -> bytes:
        count = len(plaintexts)
        if not count:
            return b""
        k = _stashed(count, factors, self.width)
        n = int(self.public_key.n)
        for m in plaintexts:
            if not 0 <= m < n:
                raise InputError("plaintext outside [0, n)")
        fs = factors + self.factors(count - k)
        plain = b"".join(int(m).to_bytes(self.key_bytes, "big") for m in plaintexts)
        native = kernels._native
        return bytes(native.paillier_mask(self.n2_modulus, self.n_be, plain, self.key_bytes, fs))
