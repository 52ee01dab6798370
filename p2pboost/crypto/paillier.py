"""Paillier keys and the raw homomorphic operations, on gmpy2 integers.

Why raw integers: ``phe.EncryptedNumber`` wraps every ciphertext in a Python object with an
exponent, a public key reference and an obfuscation flag, and every addition goes through
several method calls. The histogram hot path needs nothing but ``c1 * c2 % n**2``, so we keep
ciphertexts as :class:`gmpy2.mpz` and use ``phe`` for what it does well: prime generation and
the shape of the private key (``p``, ``q`` and the CRT constants ``hp``, ``hq``).

Encryption (the cost that matters) follows the variant of Damgard, Jurik and Nielsen ("A
generalization of Paillier's public-key system with applications to electronic voting", Int. J.
Inf. Secur. 9(6), 2010): the key owner draws ``x`` in ``Z_n*``, sets ``h = -x**2 mod n`` and
publishes ``hs = h**n mod n**2`` with the public key. A ciphertext is
``E(m) = (1 + m*n) * hs**a mod n**2`` for a *short* random exponent ``a``.

**Exponent length.** DJN draw ``a`` from ``[0, 2**ceil(k/2))`` for a ``k``-bit modulus (1024
bits at 2048); security then rests on DCR plus the hardness of telling ``hs**a`` with a short
``a`` from a random element of ``<hs>``. The best generic attack on a short exponent of
``l`` bits is Pollard's kangaroo, ``2**(l/2)`` group operations (van Oorschot and Wiener, "On
Diffie-Hellman key agreement with short exponents", EUROCRYPT '96), so ``l = 2*lambda`` already
meets a ``lambda``-bit security level; we take ``l = 4*lambda`` for margin, with ``lambda`` the
modulus' level from NIST SP 800-57 Part 1 (80 bits at 1024, 112 at 2048, 128 at 3072): 448
bits at 2048, the length Ma, Han and Lei use at that level ("Optimized Paillier's
cryptosystem with fast encryption and decryption", ACSAC 2021). The conservative DJN length is
one argument away (``FixedBaseTable(..., exponent_bits=public_key.bits // 2)``).

Because ``hs`` is fixed, ``hs**a`` is a fixed-base exponentiation: with ``w``-bit windows
(:class:`FixedBaseTable`) it costs ``ceil(l / w) - 1`` modular multiplications instead of the
``k`` squarings of ``r**n``; the key owner (the guest, who encrypts) computes it modulo ``p**2``
and ``q**2`` and recombines by CRT.

Plaintexts live in ``[0, n)``; signed values and packing are the job of
:mod:`p2pboost.crypto.packing`.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gmpy2  # type: ignore[import-untyped]
from gmpy2 import mpz

from p2pboost.crypto.additive import (
    CRT_WINDOW_BITS,
    DEFAULT_KEY_BITS,
    FINGERPRINT_BYTES,
    MAX_KEY_BITS,
    MIN_KEY_BITS,
    TABLE_MEMORY_BUDGET,
    WINDOW_BITS,
    CiphertextBatch,
    KeySizes,
    add,
    digit_rows,
    join_private,
    negate,
    random_columns,
    scalar_mul,
    split_private,
    subtract,
    table_settings,
    window_products,
)
from p2pboost.exceptions import CodecError, InputError

# Paillier's own names, and those shared with OU (p2pboost.crypto.additive) that were always
# importable from here.
__all__ = [
    # shared with OU (p2pboost.crypto.additive), importable from here as before
    "DEFAULT_KEY_BITS",
    "MAX_KEY_BITS",
    "MIN_KEY_BITS",
    "CiphertextBatch",
    # Paillier's own
    "FixedBaseTable",
    "PrivateKey",
    "PublicKey",
    "add",
    "generate_keypair",
    "negate",
    "scalar_mul",
    "subtract",
]

_FINGERPRINT_TAG = b"p2pboost/paillier/v1"


@dataclass(frozen=True, eq=False)
class PublicKey(KeySizes):
    """A Paillier public key ``n`` with the DJN fixed base ``hs = h**n mod n**2``.

    The generator is ``g = n + 1``, so ``g**m = 1 + m*n mod n**2`` costs one multiplication.
    Construction validates the numbers (it is also how keys from peers are parsed).
    """

    scheme: ClassVar[str] = "paillier"

    n: mpz
    hs: mpz
    n2: mpz = field(init=False, repr=False)
    bits: int = field(init=False)
    fingerprint: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n, hs = mpz(self.n), mpz(self.hs)
        bits = int(n.bit_length())
        if not MIN_KEY_BITS <= bits <= MAX_KEY_BITS:
            raise InputError(f"modulus of {bits} bits outside [{MIN_KEY_BITS}, {MAX_KEY_BITS}]")
        if bits % 8 or n % 2 == 0:
            raise InputError("modulus must be odd with a whole number of bytes")
        n2 = n * n
        if not 0 < hs < n2 or gmpy2.gcd(hs, n) != 1:
            raise InputError("fixed base hs is not a unit modulo n**2")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "hs", hs)
        object.__setattr__(self, "n2", n2)
        object.__setattr__(self, "bits", bits)
        digest = hashlib.sha256(_FINGERPRINT_TAG + n.to_bytes(bits // 8, "big")).digest()
        object.__setattr__(self, "fingerprint", digest[:FINGERPRINT_BYTES])

    # --- sizes -------------------------------------------------------------------------------
    @property
    def modulus(self) -> mpz:
        """The ciphertext modulus ``n**2``: a homomorphic addition is a product modulo it."""
        return self.n2

    @property
    def ciphertext_bytes(self) -> int:
        """Bytes of one ciphertext on the wire: ``2 * key_bytes`` (values below ``n**2``)."""
        return 2 * self.key_bytes

    @property
    def plaintext_bits(self) -> int:
        """Bits a packed plaintext may use: every value below ``2**plaintext_bits`` is < n."""
        return self.bits - 1

    # --- equality / serialisation --------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PublicKey):
            return NotImplemented
        return bool(self.n == other.n and self.hs == other.hs)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def to_bytes(self) -> bytes:
        """``uint16 key_bytes || n || hs`` (big-endian, fixed widths)."""
        k = self.key_bytes
        return bytes(
            struct.pack(">H", k) + self.n.to_bytes(k, "big") + self.hs.to_bytes(2 * k, "big")
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PublicKey:
        """Parse and validate :meth:`to_bytes` output; raises :class:`InputError`."""
        if len(data) < 2:
            raise InputError("public key too short")
        (k,) = struct.unpack_from(">H", data)
        if len(data) != 2 + 3 * k:
            raise InputError("public key length does not match its declared size")
        n = mpz.from_bytes(data[2 : 2 + k], "big")
        hs = mpz.from_bytes(data[2 + k :], "big")
        if n.bit_length() != 8 * k:
            raise InputError("public key modulus has leading zero bytes")
        return cls(n, hs)

    # --- validation ----------------------------------------------------------------------------
    def check_ciphertext(self, c: mpz) -> None:
        """Raise :class:`CodecError` unless ``0 < c < n**2``."""
        if not 0 < c < self.n2:
            raise CodecError("ciphertext outside (0, n**2)")

    # --- plain encryption (single values; batches go through the engine) ----------------------
    def encrypt(self, m: int, table: FixedBaseTable | None = None) -> mpz:
        """Encrypt one plaintext in ``[0, n)``; slow path for tests and tiny inputs."""
        m = mpz(m)
        if not 0 <= m < self.n:
            raise InputError("plaintext outside [0, n)")
        if table is None:
            a = mpz(secrets.randbits(self.exponent_bits))
            return (1 + m * self.n) * gmpy2.powmod(self.hs, a, self.n2) % self.n2
        return table.encrypt_many([m])[0]


@dataclass(frozen=True, eq=False)
class PrivateKey:
    """A Paillier private key: the factors ``p``, ``q`` and the CRT constants of ``phe``.

    Decryption by CRT: ``m_p = L_p(c**(p-1) mod p**2) * hp mod p`` and the same modulo ``q``,
    recombined with ``p**-1 mod q``; two half-size exponentiations instead of one full one.
    """

    public_key: PublicKey
    p: mpz
    q: mpz
    psquare: mpz = field(init=False, repr=False)
    qsquare: mpz = field(init=False, repr=False)
    hp: mpz = field(init=False, repr=False)
    hq: mpz = field(init=False, repr=False)
    p_inverse: mpz = field(init=False, repr=False)

    def __post_init__(self) -> None:
        p, q = mpz(self.p), mpz(self.q)
        if p == q or p * q != self.public_key.n:
            raise InputError("p * q does not equal the public modulus")
        n = self.public_key.n
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "psquare", p * p)
        object.__setattr__(self, "qsquare", q * q)
        # Same constants as phe.PaillierPrivateKey (h_function with g = n + 1).
        for name, prime, square in (("hp", p, p * p), ("hq", q, q * q)):
            lx = (gmpy2.powmod(n + 1, prime - 1, square) - 1) // prime
            object.__setattr__(self, name, gmpy2.invert(lx, prime))
        object.__setattr__(self, "p_inverse", gmpy2.invert(p, q))

    def __repr__(self) -> str:
        pk = self.public_key
        return f"PrivateKey(bits={pk.bits}, fingerprint={pk.fingerprint.hex()})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrivateKey):
            return NotImplemented
        return self.public_key == other.public_key and {self.p, self.q} == {other.p, other.q}

    def __hash__(self) -> int:
        return hash(self.public_key)

    def decrypt(self, c: mpz) -> mpz:
        """Raw CRT decryption of one ciphertext to its plaintext in ``[0, n)``."""
        p, q = self.p, self.q
        mp = (gmpy2.powmod(c, p - 1, self.psquare) - 1) // p * self.hp % p
        mq = (gmpy2.powmod(c, q - 1, self.qsquare) - 1) // q * self.hq % q
        return mp + (mq - mp) * self.p_inverse % q * p

    def to_bytes(self) -> bytes:
        """``public_key.to_bytes() || p || q`` (``p``, ``q`` as ``key_bytes`` each). SECRET."""
        return join_private(self.public_key.to_bytes(), self.public_key.key_bytes, self.p, self.q)

    @classmethod
    def from_bytes(cls, data: bytes) -> PrivateKey:
        """Parse :meth:`to_bytes` output; raises :class:`InputError` when inconsistent."""
        public, p, q = split_private(data)
        return cls(PublicKey.from_bytes(public), p, q)


def generate_keypair(
    bits: int = DEFAULT_KEY_BITS, *, allow_insecure: bool = False
) -> tuple[PublicKey, PrivateKey]:
    """Generate a key pair with ``phe`` and add the DJN fixed base.

    ``bits`` below 2048 needs ``allow_insecure=True`` (1024 is useful to compare with published
    figures and for fast tests); below 1024 is always refused.
    """
    if bits % 8 or not MIN_KEY_BITS <= bits <= MAX_KEY_BITS:
        raise InputError(
            f"key size must be a multiple of 8 in [{MIN_KEY_BITS}, {MAX_KEY_BITS}], got {bits}"
        )
    if bits < DEFAULT_KEY_BITS and not allow_insecure:
        raise InputError(f"{bits}-bit keys are below 2048 bits; pass allow_insecure=True")
    from phe import paillier  # imported lazily: phe pulls in its own number-theory setup

    phe_public, phe_private = paillier.generate_paillier_keypair(n_length=bits)
    n = mpz(phe_public.n)
    n2 = n * n
    while True:
        x = mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(x, n) == 1:
            break
    h = (-x * x) % n
    hs = gmpy2.powmod(h, n, n2)
    public = PublicKey(n, hs)
    return public, PrivateKey(public, mpz(phe_private.p), mpz(phe_private.q))


def _default_window(public_key: PublicKey, exponent_bits: int, *, crt: bool) -> int:
    """8 bits for public tables; for CRT tables the widest window up to 12 bits whose two
    tables fit in :data:`TABLE_MEMORY_BUDGET` bytes (12 at 1024 bits, 11 at 2048)."""
    if not crt:
        return WINDOW_BITS
    entry = public_key.key_bytes  # p**2 and q**2 are about as long as n
    for w in range(CRT_WINDOW_BITS, WINDOW_BITS, -1):
        if 2 * -(-exponent_bits // w) * (1 << w) * entry <= TABLE_MEMORY_BUDGET:
            return w
    return WINDOW_BITS


class FixedBaseTable:
    """Fixed-base exponentiation tables for ``hs**a``: encryption without ``r**n``.

    ``rows[j][d] = hs**(d * 2**(w*j))`` for window ``j`` and digit ``d`` of ``w`` bits, so
    ``hs**a`` for an exponent with digits ``d_0 .. d_{W-1}`` is a product of ``W`` table entries:
    ``ceil(exponent_bits / w) - 1`` modular multiplications and no squaring.

    With the private key (the guest encrypts its own gradients) the tables are kept modulo
    ``p**2`` and ``q**2`` and the two halves are recombined by CRT: a product of half-size
    numbers costs about a third of a full one (measured: 3.1 against 8.5 us at 2048 bits), so two
    of them beat one modulo ``n**2``. Wider windows trade memory for products: ``W * 2**w``
    entries per modulus. The default is 8 bits for public-key tables (448-bit exponent at 2048
    bits: 56 windows, 3.5 MiB) and, for CRT tables, the widest window up to 12 bits within
    :data:`TABLE_MEMORY_BUDGET` (2048 bits: w=11, 41 products per half, 42 MiB), built once per
    worker process of the key owner.
    """

    __slots__ = (
        "_crt",
        "_pinv",
        "exponent_bits",
        "n",
        "n2",
        "tables",
        "window_bits",
        "windows",
    )

    def __init__(
        self,
        public_key: PublicKey,
        private_key: PrivateKey | None = None,
        *,
        window_bits: int | None = None,
        exponent_bits: int | None = None,
    ) -> None:
        ebits, w = table_settings(
            public_key,
            private_key,
            exponent_bits,
            window_bits,
            lambda e: _default_window(public_key, e, crt=private_key is not None),
        )
        self.n, self.n2 = public_key.n, public_key.n2
        self.window_bits = w
        self.exponent_bits = ebits
        self.windows = -(-self.exponent_bits // w)
        last_bits = self.exponent_bits - (self.windows - 1) * w
        if private_key is not None:
            p2, q2 = private_key.psquare, private_key.qsquare
            moduli = [(p2, public_key.hs % p2), (q2, public_key.hs % q2)]
            self._pinv = gmpy2.invert(p2, q2)
        else:
            moduli = [(public_key.n2, public_key.hs)]
            self._pinv = None
        self._crt = private_key is not None
        self.tables = [(mod, self._build(base, mod, last_bits)) for mod, base in moduli]

    def _build(self, base: mpz, mod: mpz, last_bits: int) -> list[list[mpz]]:
        rows: list[list[mpz]] = []
        for j in range(self.windows):
            size = 1 << (last_bits if j == self.windows - 1 else self.window_bits)
            row = [mpz(1)]
            acc = mpz(1)
            for _d in range(1, size):
                acc = acc * base % mod
                row.append(acc)
            rows.append(row)
            base = acc * base % mod  # base ** (2 ** window_bits)
        return rows

    def random_digits(self, count: int) -> list[Any]:
        """``count`` uniformly random exponents in ``[0, 2**exponent_bits)``, as digit lists."""
        return digit_rows(self._random_columns(count)) if count else []

    def _random_columns(self, count: int) -> list[list[int]]:
        return random_columns(count, self.window_bits, self.windows, self.exponent_bits)

    def factor(self, digits: Iterable[int]) -> mpz:
        """``hs**a mod n**2`` for the exponent with (little-endian) window ``digits``."""
        return self.encrypt_many([0], [digits])[0]

    _products = staticmethod(window_products)

    def encrypt_many(
        self, plaintexts: Sequence[int], digits: Sequence[Iterable[int]] | None = None
    ) -> list[mpz]:
        """``(1 + m*n) * hs**a mod n**2`` for each ``m`` in ``[0, n)``, fresh ``a`` for each.

        This is the engine's worker kernel: the loop is the fixed-base product and nothing else.
        """
        values = [mpz(m) for m in plaintexts]
        n, n2 = self.n, self.n2
        for m in values:
            if not 0 <= m < n:
                raise InputError("plaintext outside [0, n)")
        if not values:
            return []
        if digits is None:
            columns = self._random_columns(len(values))
        else:
            columns = [list(c) for c in zip(*digits, strict=True)]
            if len(columns) != self.windows or len(columns[0]) != len(values):
                raise InputError("need one digit per window for every plaintext")
        if self._crt:
            (p2, rows_p), (q2, rows_q) = self.tables
            pinv = self._pinv
            out: list[mpz] = []
            append = out.append
            fps, fqs = self._products(rows_p, p2, columns), self._products(rows_q, q2, columns)
            for m, fp, fq in zip(values, fps, fqs, strict=True):
                x = 1 + m * n
                cp = x * fp % p2
                append(cp + p2 * ((x * fq % q2 - cp) * pinv % q2))
            return out
        ((_, rows),) = self.tables
        factors = self._products(rows, n2, columns)
        return [(1 + m * n) * f % n2 for m, f in zip(values, factors, strict=True)]

    def random_factors(self, count: int) -> list[mpz]:
        """``count`` fresh randomisers ``hs**a mod n**2`` (encryptions of zero), to be made
        ahead of time and each used by :meth:`encrypt_with_factors` exactly once."""
        return self.encrypt_many([0] * count)

    def encrypt_with_factors(self, plaintexts: Sequence[int], factors: Sequence[mpz]) -> list[mpz]:
        """``(1 + m*n) * f mod n**2``: one product per value with precomputed ``factors``."""
        if len(plaintexts) != len(factors):
            raise InputError("need one factor per plaintext")
        n, n2 = self.n, self.n2
        out = []
        for m, f in zip(plaintexts, factors, strict=True):
            m = mpz(m)
            if not 0 <= m < n:
                raise InputError("plaintext outside [0, n)")
            out.append((1 + m * n) * f % n2)
        return out
