"""The two additive schemes behind one face: Paillier (the default) and Okamoto-Uchiyama.

The engine, the histograms, the compression and the wire format take either kind of key: both
expose the same sizes (``bits``, ``key_bytes``, ``ciphertext_bytes``, ``plaintext_bits``), a
``modulus`` (a homomorphic addition is a product modulo it), a ``fingerprint``, ``to_bytes`` /
``from_bytes`` and ``table()`` (fixed-base encryption tables). This module names the scheme of a
key and makes, parses and checks keys by scheme name.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, get_args

from p2pboost.crypto.ou import OUPrivateKey, OUPublicKey, OUTable, generate_ou_keypair
from p2pboost.crypto.paillier import (
    DEFAULT_KEY_BITS,
    FixedBaseTable,
    PrivateKey,
    PublicKey,
    generate_keypair,
)
from p2pboost.exceptions import InputError, KeyMismatchError

__all__ = [
    "SCHEMES",
    "AnyPrivateKey",
    "AnyPublicKey",
    "AnyTable",
    "Scheme",
    "check_scheme",
    "make_keypair",
    "make_table",
    "private_key_from_bytes",
    "public_key_from_bytes",
]

Scheme: TypeAlias = Literal["paillier", "ou"]
#: Scheme names, the default first.
SCHEMES: tuple[str, ...] = get_args(Scheme)

AnyPublicKey: TypeAlias = PublicKey | OUPublicKey
AnyPrivateKey: TypeAlias = PrivateKey | OUPrivateKey
AnyTable: TypeAlias = FixedBaseTable | OUTable


def check_scheme(scheme: object) -> Scheme:
    """``scheme`` if it names a scheme, else an :class:`InputError` that lists them."""
    if scheme not in SCHEMES:
        raise InputError(f"unknown encryption scheme {scheme!r}; choose one of {list(SCHEMES)}")
    return scheme  # type: ignore[return-value]


def make_keypair(
    scheme: str = "paillier", bits: int = DEFAULT_KEY_BITS, *, allow_insecure: bool = False
) -> tuple[AnyPublicKey, AnyPrivateKey]:
    """A fresh key pair of ``scheme`` with a ``bits``-bit modulus."""
    if check_scheme(scheme) == "ou":
        return generate_ou_keypair(bits, allow_insecure=allow_insecure)
    return generate_keypair(bits, allow_insecure=allow_insecure)


def public_key_from_bytes(scheme: str, data: bytes) -> AnyPublicKey:
    """Parse and validate a public key of ``scheme`` (raises :class:`InputError`)."""
    if check_scheme(scheme) == "ou":
        return OUPublicKey.from_bytes(data)
    return PublicKey.from_bytes(data)


def private_key_from_bytes(scheme: str, data: bytes) -> AnyPrivateKey:
    """Parse and validate a private key of ``scheme`` (raises :class:`InputError`)."""
    if check_scheme(scheme) == "ou":
        return OUPrivateKey.from_bytes(data)
    return PrivateKey.from_bytes(data)


def make_table(
    public_key: AnyPublicKey,
    private_key: AnyPrivateKey | None = None,
    *,
    window_bits: int | None = None,
) -> AnyTable:
    """Fixed-base encryption tables for ``public_key`` (CRT tables with its private key)."""
    if isinstance(public_key, OUPublicKey):
        if private_key is not None and not isinstance(private_key, OUPrivateKey):
            raise KeyMismatchError("private key is not an OU key")
        return OUTable(public_key, private_key, window_bits=window_bits)
    if private_key is not None and not isinstance(private_key, PrivateKey):
        raise KeyMismatchError("private key is not a Paillier key")
    return FixedBaseTable(public_key, private_key, window_bits=window_bits)
