"""Okamoto-Uchiyama keys and encryption, on gmpy2 integers: a cheaper additive scheme.

Okamoto and Uchiyama ("A new public-key cryptosystem as secure as factoring", EUROCRYPT '98)
work modulo ``n = p**2 * q``. The public key is ``(n, g, h = g**n mod n)``; a plaintext ``m``
in ``[0, p)`` encrypts to ``E(m) = g**m * h**r mod n``, and the key owner decrypts with
``m = L(c**e mod p**2) / L(g**e mod p**2) mod p`` for ``L(x) = (x - 1) / p``, with an
exponent ``e`` that takes ``h`` to 1 modulo ``p**2`` and ``g`` to 1 modulo ``p``.
The scheme is additively homomorphic like Paillier (``E(a) * E(b) = E(a + b mod p)``), but:

* ciphertexts live modulo ``n``, not ``n**2``: at the same 2048-bit modulus a homomorphic
  addition multiplies 2048-bit numbers instead of 4096-bit ones (about 3x cheaper here), and a
  ciphertext is half the bytes;
* the plaintext space is ``[0, p)`` with ``|p| = |n| / 3`` (681 usable bits at 2048), so fewer
  packed sums fit one ciphertext (:attr:`OUPublicKey.plaintext_bits` drives the packing);
* decryption is one exponentiation modulo ``p**2`` (a third of the modulus).

**Keys with a short decryption exponent.** With a random ``g``, ``e`` must be ``p - 1``
(682 bits at 2048). Coron, Naccache and Paillier ("Accelerating Okamoto-Uchiyama public-key
cryptosystem", Electronics Letters 35(4), 1999; SecretFlow's HEU builds its keys so) choose
``p - 1 = t u`` with ``t`` a prime of ``2 * lambda`` bits (224 at 2048) and ``g = g0**u``:
then ``g`` has order ``p t`` modulo ``p**2``, ``h = g**n`` has order ``t``, and ``e = t``,
about three times cheaper. :func:`generate_ou_keypair` makes such keys; the public key's
format does not change, the private key carries ``t`` (:attr:`OUPrivateKey.t`), and keys made
before, without ``t``, still load and decrypt with ``p - 1``. The best generic attack that
uses ``h``'s order ``t`` (finding ``p`` by a baby-step giant-step search with gcds modulo
``n``) costs about ``sqrt(t) = 2**lambda``, the level of the modulus.

**Randomness.** ``h**r`` with a *short* exponent ``r`` of ``4 * lambda`` bits (448 at 2048),
with the same argument and margin as our Paillier (see :mod:`p2pboost.crypto.paillier`): the
best generic attack on an ``l``-bit exponent costs ``2**(l/2)``. Modulo ``p`` the exponent
only counts modulo ``t``, where ``r mod t`` is within ``t / 2**(4 lambda)`` of uniform, and
working there at all needs ``p``; docs/explanation/ou.md compares it with keys without ``t``.
Both ``g**m`` and ``h**r`` are fixed-base exponentiations (:class:`OUTable`); the key owner
computes them modulo ``p**2`` and ``q`` and recombines by CRT.

**Security caveats** (docs/explanation/ou.md). OU is IND-CPA under the p-subgroup assumption;
it is *not* secure against chosen ciphertexts: whoever learns the decryption of a ciphertext of
a value ``>= p`` learns a multiple of ``p``, hence the factorisation. The key owner therefore
never reveals a decrypted value and never acts on one outside the layout its own packing
allows (every decrypted field is range-checked by :mod:`p2pboost.crypto.compress`, and a
violation aborts the session). Factoring ``p**2 * q`` has no known method faster than for an
RSA modulus of the same size at these sizes (the lattice method of Boneh, Durfee and
Howgrave-Graham, CRYPTO '99, needs a large exponent ``r`` in ``p**r q``; ECM is bounded by the
681-bit ``p``), so we assign the NIST SP 800-57 level of the modulus size and recommend 3072
bits for long-lived deployments.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gmpy2  # type: ignore[import-untyped]
import numpy as np
from gmpy2 import mpz

from p2pboost.crypto.additive import (
    CRT_WINDOW_BITS,
    DEFAULT_KEY_BITS,
    MAX_KEY_BITS,
    MIN_KEY_BITS,
    SECURITY_LEVELS,
    TABLE_MEMORY_BUDGET,
    WINDOW_BITS,
    KeySizes,
    digit_rows,
    join_private,
    random_columns,
    split_private,
    table_settings,
    window_products,
)
from p2pboost.exceptions import CodecError, InputError

__all__ = ["OUPrivateKey", "OUPublicKey", "OUTable", "generate_ou_keypair"]

_FINGERPRINT_TAG = b"p2pboost/ou/v1"
_FINGERPRINT_BYTES = 16
#: Miller-Rabin rounds of :func:`gmpy2.is_prime` for ``t`` and ``p`` (as ``next_prime``'s 25).
_PRIME_ROUNDS = 25


@dataclass(frozen=True, eq=False)
class OUPublicKey(KeySizes):
    """An Okamoto-Uchiyama public key ``(n, g, h)`` with ``n = p**2 q`` of ``bits`` bits.

    Construction validates the numbers (it is also how keys from peers are parsed). The sizes
    and operations mirror :class:`~p2pboost.crypto.paillier.PublicKey` so that the engine, the
    histograms and the wire format take either; :attr:`modulus` is the ciphertext modulus.
    """

    scheme: ClassVar[str] = "ou"

    n: mpz
    g: mpz
    h: mpz
    bits: int = field(init=False)
    fingerprint: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n, g, h = mpz(self.n), mpz(self.g), mpz(self.h)
        bits = int(n.bit_length())
        if not MIN_KEY_BITS <= bits <= MAX_KEY_BITS:
            raise InputError(f"modulus of {bits} bits outside [{MIN_KEY_BITS}, {MAX_KEY_BITS}]")
        if bits % 8 or n % 2 == 0:
            raise InputError("modulus must be odd with a whole number of bytes")
        for name, v in (("g", g), ("h", h)):
            if not 1 < v < n or gmpy2.gcd(v, n) != 1:
                raise InputError(f"{name} is not a unit modulo n")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "g", g)
        object.__setattr__(self, "h", h)
        object.__setattr__(self, "bits", bits)
        k = bits // 8
        digest = hashlib.sha256(
            _FINGERPRINT_TAG + n.to_bytes(k, "big") + g.to_bytes(k, "big") + h.to_bytes(k, "big")
        ).digest()
        object.__setattr__(self, "fingerprint", digest[:_FINGERPRINT_BYTES])

    # --- sizes -------------------------------------------------------------------------------
    @property
    def modulus(self) -> mpz:
        """The ciphertext modulus ``n``: a homomorphic addition is a product modulo it."""
        return self.n

    @property
    def ciphertext_bytes(self) -> int:
        """Bytes of one ciphertext on the wire: ``key_bytes`` (values below ``n``)."""
        return self.key_bytes

    @property
    def prime_bits(self) -> int:
        """Bits of ``p`` (and about those of ``q``): a third of the modulus."""
        return self.bits // 3

    @property
    def plaintext_bits(self) -> int:
        """Bits a packed plaintext may use: every value below ``2**plaintext_bits`` is < p."""
        return self.prime_bits - 1

    # --- equality / serialisation --------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OUPublicKey):
            return NotImplemented
        return bool(self.n == other.n and self.g == other.g and self.h == other.h)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def to_bytes(self) -> bytes:
        """``uint16 key_bytes || n || g || h`` (big-endian, ``key_bytes`` each)."""
        k = self.key_bytes
        return bytes(
            struct.pack(">H", k)
            + self.n.to_bytes(k, "big")
            + self.g.to_bytes(k, "big")
            + self.h.to_bytes(k, "big")
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> OUPublicKey:
        """Parse and validate :meth:`to_bytes` output; raises :class:`InputError`."""
        if len(data) < 2:
            raise InputError("public key too short")
        (k,) = struct.unpack_from(">H", data)
        if len(data) != 2 + 3 * k:
            raise InputError("public key length does not match its declared size")
        n, g, h = (mpz.from_bytes(data[2 + i * k : 2 + (i + 1) * k], "big") for i in range(3))
        if n.bit_length() != 8 * k:
            raise InputError("public key modulus has leading zero bytes")
        return cls(n, g, h)

    # --- validation ----------------------------------------------------------------------------
    def check_ciphertext(self, c: mpz) -> None:
        """Raise :class:`CodecError` unless ``0 < c < n``."""
        if not 0 < c < self.n:
            raise CodecError("ciphertext outside (0, n)")

    def encrypt(self, m: int, table: OUTable | None = None) -> mpz:
        """Encrypt one plaintext below ``2**plaintext_bits``; slow path for tests."""
        m = mpz(m)
        if m < 0 or m >> self.plaintext_bits:
            raise InputError(f"plaintext outside [0, 2**{self.plaintext_bits})")
        if table is None:
            r = mpz(secrets.randbits(self.exponent_bits))
            return gmpy2.powmod(self.g, m, self.n) * gmpy2.powmod(self.h, r, self.n) % self.n
        return table.encrypt_many([m])[0]


@dataclass(frozen=True, eq=False)
class OUPrivateKey:
    """The factors ``p``, ``q`` of ``n = p**2 q``, the decryption exponent and its constant.

    ``t`` is the ``2 * security_bits``-bit prime factor of ``p - 1`` that the keys of
    :func:`generate_ou_keypair` are built around (Coron, Naccache and Paillier's structure: see
    the module docstring): decryption raises ``c`` to ``t`` instead of ``p - 1``, about three
    times cheaper at 2048 bits. ``t`` is ``None`` for a key made before that structure (its
    ``g`` is a random unit, so only ``p - 1`` clears the randomiser); such keys, and the bytes
    they were saved as, keep working with exponent ``p - 1``. ``t`` is as secret as ``p``:
    ``h**t - 1`` is a multiple of ``p**2``, so a gcd with ``n`` would factor it.

    The attributes ``p``, ``q``, ``t``, ``psquare``, ``gp_inverse`` and
    :attr:`decryption_exponent` are the contract of the decryption kernels: ``m = L(c**e mod
    p**2) * gp_inverse mod p`` with ``e = decryption_exponent`` and ``L(x) = (x - 1) / p``.
    Construction validates all of it (it is also how keys are parsed) and raises
    :class:`InputError` naming what is wrong.
    """

    public_key: OUPublicKey
    p: mpz
    q: mpz
    t: mpz | None = None
    psquare: mpz = field(init=False, repr=False)
    gp_inverse: mpz = field(init=False, repr=False)
    _exponent: mpz = field(init=False, repr=False)

    def __post_init__(self) -> None:
        p, q = mpz(self.p), mpz(self.q)
        pk = self.public_key
        if p == q or p * p * q != pk.n or p.bit_length() != pk.prime_bits:
            raise InputError("p**2 * q does not equal the public modulus")
        p2 = p * p
        if self.t is None:
            t, exponent, name = None, p - 1, "p-1"
        else:
            t = mpz(self.t)
            _check_order(pk, p, p2, t)
            exponent, name = t, "t"
        lg = (gmpy2.powmod(pk.g, exponent, p2) - 1) // p % p
        if lg == 0:
            raise InputError(f"g**({name}) has order 1 modulo p**2: not an OU generator")
        try:
            gp_inverse = gmpy2.invert(lg, p)
        except ZeroDivisionError:
            raise InputError(f"L(g**({name})) has no inverse modulo p: p is not prime") from None
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "psquare", p2)
        object.__setattr__(self, "gp_inverse", gp_inverse)
        object.__setattr__(self, "_exponent", exponent)

    @property
    def decryption_exponent(self) -> mpz:
        """The exponent decryption raises ``c mod p**2`` to: ``t``, or ``p - 1`` for a key
        without ``t``; :attr:`gp_inverse` is the inverse of ``L(g**e mod p**2)`` for it."""
        return self._exponent

    def __repr__(self) -> str:
        pk = self.public_key
        return f"OUPrivateKey(bits={pk.bits}, fingerprint={pk.fingerprint.hex()})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OUPrivateKey):
            return NotImplemented
        return self.public_key == other.public_key and self.p == other.p and self.t == other.t

    def __hash__(self) -> int:
        return hash(self.public_key)

    def decrypt(self, c: mpz) -> mpz:
        """Raw decryption to ``m mod p``. Never reveal the result of a ciphertext a peer made
        unless it passed the range checks of its layout (see the module docstring).

        ``gmpy2.powmod`` is GMP's ``mpz_powm``, whose timing depends on the secret exponent
        (see docs/explanation/ou.md on why the gmpy2 path accepts that)."""
        p = self.p
        return (gmpy2.powmod(c, self._exponent, self.psquare) - 1) // p * self.gp_inverse % p

    def to_bytes(self) -> bytes:
        """``public_key.to_bytes() || p || q || t`` (``key_bytes`` each; without ``t`` for a
        key that has none, the format of keys made before it). SECRET."""
        k = self.public_key.key_bytes
        data = join_private(self.public_key.to_bytes(), k, self.p, self.q)
        return data if self.t is None else bytes(data + self.t.to_bytes(k, "big"))

    @classmethod
    def from_bytes(cls, data: bytes) -> OUPrivateKey:
        """Parse :meth:`to_bytes` output, with ``t`` (``2 + 6 * key_bytes`` bytes) or without
        (``2 + 5 * key_bytes``, a key made before ``t``); raises :class:`InputError` when the
        bytes are malformed or inconsistent."""
        if len(data) < 2:
            raise InputError("private key too short")
        (k,) = struct.unpack_from(">H", data)
        t = None
        if k and len(data) == 2 + 6 * k:
            data, t = data[: 2 + 5 * k], mpz.from_bytes(data[2 + 5 * k :], "big")
        public, p, q = split_private(data)
        return cls(OUPublicKey.from_bytes(public), p, q, t)


def _check_order(public_key: OUPublicKey, p: mpz, psquare: mpz, t: mpz) -> None:
    """Raise :class:`InputError` unless ``t`` is a prime factor of ``p - 1`` of at least
    ``2 * security_bits`` bits and the public key has the structure decryption by ``t`` needs:
    ``g``'s order modulo ``p`` divides ``t`` (so ``L`` of ``g**t`` is defined), ``h**t = 1``
    modulo ``p**2`` (so ``t`` clears every randomiser) and ``h`` is not 1 modulo ``p`` (so the
    randomiser has order ``t`` there, the margin docs/explanation/ou.md counts on)."""
    need = 2 * public_key.security_bits
    if t <= 1 or t.bit_length() < need:
        raise InputError(f"t has {t.bit_length()} bits, fewer than 2 * security_bits = {need}")
    if (p - 1) % t:
        raise InputError("t does not divide p - 1")
    if not gmpy2.is_prime(t, _PRIME_ROUNDS):
        raise InputError("t is not prime")
    if gmpy2.powmod(public_key.g, t, p) != 1:
        raise InputError("g**t is not 1 modulo p: the public key lacks the structure of t")
    if gmpy2.powmod(public_key.h, t, psquare) != 1:
        raise InputError("h**t is not 1 modulo p**2: the public key lacks the structure of t")
    if public_key.h % p == 1:
        raise InputError("h is 1 modulo p: encryption would have no randomness there")


def _random_prime(bits: int) -> mpz:
    """A random prime of exactly ``bits`` bits (top two bits set, so products keep their size)."""
    while True:
        candidate = gmpy2.next_prime(mpz(secrets.randbits(bits)) | (mpz(3) << (bits - 2)))
        if candidate.bit_length() == bits:
            return candidate


def _prime_over(t: mpz, bits: int) -> mpz:
    """A random prime ``p = t * u + 1`` of exactly ``bits`` bits with its top two bits set.

    ``u`` is drawn uniformly (even, so that ``p`` is odd) from the range that gives ``p`` that
    size, afresh for every candidate; about one in ``ln(2**bits) / 2`` candidates is prime
    (236 at 682 bits), most rejected by GMP's trial division before any Miller-Rabin round.
    """
    lo = ((mpz(3) << (bits - 2)) - 1 + t - 1) // t  # least u with t*u + 1 >= 3 * 2**(bits-2)
    span = int(((mpz(1) << bits) - 2) // t - lo + 1)  # u up to t*u + 1 < 2**bits
    while True:
        u = lo + mpz(secrets.randbelow(span))
        p = t * (u + (u & 1)) + 1
        if p >> (bits - 2) == 3 and gmpy2.is_prime(p, _PRIME_ROUNDS):
            return p


def _security_bits(bits: int) -> int:
    """The NIST SP 800-57 level of a ``bits``-bit modulus (:attr:`KeySizes.security_bits`)."""
    return next(level for size, level in SECURITY_LEVELS if bits >= size)


def generate_ou_keypair(
    bits: int = DEFAULT_KEY_BITS, *, allow_insecure: bool = False
) -> tuple[OUPublicKey, OUPrivateKey]:
    """Generate ``n = p**2 q`` of exactly ``bits`` bits with ``|p| = bits // 3``, ``p - 1 = t u``.

    The structure of Coron, Naccache and Paillier ("Accelerating Okamoto-Uchiyama public-key
    cryptosystem", Electronics Letters 35(4), 1999), as SecretFlow's HEU builds it: ``t`` is a
    random prime of ``2 * security_bits`` bits (224 at 2048), ``p = t u + 1`` a prime of
    ``bits // 3`` bits with its top two bits set, ``q`` a random prime with ``p`` not dividing
    ``q - 1``. ``g = g0**u mod n`` for a random unit ``g0``, so that ``g``'s order modulo
    ``p**2`` is ``p t`` (checked: ``g`` is not 1 modulo ``p`` and ``g**t mod p**2`` has
    order ``p``), and ``h = g**n mod n``, of order ``t`` modulo ``p``: decryption raises to
    ``t``. The public key has the format it always had. Primes are tested with
    :func:`gmpy2.is_prime` / :func:`gmpy2.next_prime` on ``secrets`` randomness (GMP's trial
    division, BPSW and Miller-Rabin rounds).
    """
    if bits % 8 or not MIN_KEY_BITS <= bits <= MAX_KEY_BITS:
        raise InputError(
            f"key size must be a multiple of 8 in [{MIN_KEY_BITS}, {MAX_KEY_BITS}], got {bits}"
        )
    if bits < DEFAULT_KEY_BITS and not allow_insecure:
        raise InputError(f"{bits}-bit keys are below 2048 bits; pass allow_insecure=True")
    p_bits = bits // 3
    t = _random_prime(2 * _security_bits(bits))
    p = _prime_over(t, p_bits)
    while True:
        q = _random_prime(bits - 2 * p_bits)
        n = p * p * q
        if p != q and n.bit_length() == bits and (q - 1) % p != 0:
            break
    p2, u = p * p, (p - 1) // t
    while True:
        g0 = mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(g0, n) != 1:
            continue
        g = gmpy2.powmod(g0, u, n)
        if g % p != 1 and (gmpy2.powmod(g, t, p2) - 1) // p % p != 0:
            break
    public = OUPublicKey(n, g, gmpy2.powmod(g, n, n))
    return public, OUPrivateKey(public, p, q, t)


def _default_window(public_key: OUPublicKey, *, crt: bool) -> int:
    """8 bits for public tables; for the key owner the widest window up to 12 bits whose
    ``h`` tables fit half of :data:`TABLE_MEMORY_BUDGET` (the ``g`` tables grow on demand)."""
    if not crt:
        return WINDOW_BITS
    entry = public_key.key_bytes  # p**2 (two thirds of n) plus q (one third)
    for w in range(CRT_WINDOW_BITS, WINDOW_BITS, -1):
        if -(-public_key.exponent_bits // w) * (1 << w) * entry <= TABLE_MEMORY_BUDGET // 2:
            return w
    return WINDOW_BITS


class _Tables:
    """Fixed-base rows of one base modulo one modulus: ``rows[j][d] = base**(d * 2**(w*j))``,
    built on demand up to the windows asked for."""

    __slots__ = ("_next", "mod", "rows", "w")

    def __init__(self, base: mpz, mod: mpz, w: int) -> None:
        self.mod, self.w = mod, w
        self.rows: list[list[mpz]] = []
        self._next = base % mod

    def upto(self, windows: int) -> list[list[mpz]]:
        mod, size = self.mod, 1 << self.w
        while len(self.rows) < windows:
            row = [mpz(1)]
            acc = mpz(1)
            base = self._next
            for _d in range(1, size):
                acc = acc * base % mod
                row.append(acc)
            self.rows.append(row)
            self._next = acc * base % mod
        return self.rows[:windows]


def _columns(values: Sequence[mpz], w: int, windows: int) -> list[list[int]]:
    """Window ``j``'s ``w``-bit digit of every value, for ``j < windows`` (little-endian)."""
    width = -(-(windows * w) // 8)
    raw = np.frombuffer(b"".join(int(v).to_bytes(width, "little") for v in values), np.uint8)
    bits = np.unpackbits(raw.reshape(len(values), width), axis=1, bitorder="little")
    bits = bits[:, : windows * w].reshape(len(values), windows, w).astype(np.int64)
    digits = bits @ (np.int64(1) << np.arange(w, dtype=np.int64))
    return list(digits.T.tolist())


class OUTable:
    """Fixed-base tables for ``g**m`` and ``h**r``: encryption as products of table entries.

    With the private key the tables are kept modulo ``p**2`` and ``q`` (together two thirds of
    the size of ``n``) and recombined by CRT; ``g``'s rows are built only as far as the longest
    plaintext needs (packed gradients use about 150 of the 681 bits at 2048). The interface is
    that of :class:`~p2pboost.crypto.paillier.FixedBaseTable`.
    """

    def __init__(
        self,
        public_key: OUPublicKey,
        private_key: OUPrivateKey | None = None,
        *,
        window_bits: int | None = None,
        exponent_bits: int | None = None,
    ) -> None:
        ebits, w = table_settings(
            public_key,
            private_key,
            exponent_bits,
            window_bits,
            lambda _: _default_window(public_key, crt=private_key is not None),
        )
        self.public_key = public_key
        self.n = public_key.n
        self.window_bits = w
        self.exponent_bits = ebits
        self.windows = -(-ebits // w)
        self.plain_bits = public_key.plaintext_bits
        if private_key is not None:
            p2, q = private_key.psquare, private_key.q
            self._moduli = [p2, q]
            self._pinv = gmpy2.invert(p2, q)
        else:
            self._moduli = [public_key.n]
            self._pinv = None
        self._g = [_Tables(public_key.g, mod, w) for mod in self._moduli]
        self._h = [_Tables(public_key.h, mod, w) for mod in self._moduli]
        for t in self._h:
            t.upto(self.windows)

    def random_columns(self, count: int) -> list[list[int]]:
        """Window digits of ``count`` random exponents ``r`` (see
        :func:`~p2pboost.crypto.additive.random_columns`)."""
        return random_columns(count, self.window_bits, self.windows, self.exponent_bits)

    def random_digits(self, count: int) -> list[Any]:
        return digit_rows(self.random_columns(count)) if count else []

    def _combine(self, parts: list[list[mpz]]) -> list[mpz]:
        if self._pinv is None:
            return parts[0]
        p2, q = self._moduli
        pinv = self._pinv
        return [a + p2 * ((b - a) * pinv % q) for a, b in zip(parts[0], parts[1], strict=True)]

    def _check(self, plaintexts: Iterable[int]) -> list[mpz]:
        values = [mpz(m) for m in plaintexts]
        for m in values:
            if m < 0 or m >> self.plain_bits:
                raise InputError(f"plaintext outside [0, 2**{self.plain_bits})")
        return values

    def _plain_windows(self, values: Sequence[mpz]) -> int:
        top = max((int(v.bit_length()) for v in values), default=0)
        return max(1, -(-top // self.window_bits))

    def encrypt_many(
        self, plaintexts: Sequence[int], digits: Sequence[Iterable[int]] | None = None
    ) -> list[mpz]:
        """``g**m * h**r mod n`` for each ``m``, a fresh short ``r`` for each (or the given
        window ``digits`` of ``r``)."""
        values = self._check(plaintexts)
        if not values:
            return []
        if digits is None:
            r_cols = self.random_columns(len(values))
        else:
            r_cols = [list(c) for c in zip(*digits, strict=True)]
            if len(r_cols) != self.windows or len(r_cols[0]) != len(values):
                raise InputError("need one digit per window for every plaintext")
        wm = self._plain_windows(values)
        m_cols = _columns(values, self.window_bits, wm)
        parts = [
            window_products(gt.upto(wm) + ht.rows, gt.mod, m_cols + r_cols)
            for gt, ht in zip(self._g, self._h, strict=True)
        ]
        return self._combine(parts)

    def factor(self, digits: Iterable[int]) -> mpz:
        """``h**r mod n`` for the exponent with (little-endian) window ``digits``."""
        return self.encrypt_many([0], [digits])[0]

    def random_factors(self, count: int) -> list[mpz]:
        """``count`` fresh randomisers ``h**r mod n`` (encryptions of zero), each to be used by
        :meth:`encrypt_with_factors` exactly once."""
        if count <= 0:
            return []
        cols = self.random_columns(count)
        return self._combine([window_products(ht.rows, ht.mod, cols) for ht in self._h])

    def encrypt_with_factors(self, plaintexts: Sequence[int], factors: Sequence[mpz]) -> list[mpz]:
        """``g**m * f mod n``: the fixed-base ``g**m`` (short: packed plaintexts) times a
        precomputed randomiser."""
        if len(plaintexts) != len(factors):
            raise InputError("need one factor per plaintext")
        values = self._check(plaintexts)
        if not values:
            return []
        wm = self._plain_windows(values)
        m_cols = _columns(values, self.window_bits, wm)
        gm = self._combine([window_products(gt.upto(wm), gt.mod, m_cols) for gt in self._g])
        n = self.n
        return [a * f % n for a, f in zip(gm, factors, strict=True)]
