"""Shared fixtures: one small key pair and one engine for the whole session (keys are slow)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.paillier import PrivateKey, PublicKey, generate_keypair


@pytest.fixture(scope="session")
def keypair() -> tuple[PublicKey, PrivateKey]:
    """A 1024-bit key: insecure on purpose, to keep the tests fast."""
    return generate_keypair(1024, allow_insecure=True)


@pytest.fixture(scope="session")
def public_key(keypair: tuple[PublicKey, PrivateKey]) -> PublicKey:
    return keypair[0]


@pytest.fixture(scope="session")
def private_key(keypair: tuple[PublicKey, PrivateKey]) -> PrivateKey:
    return keypair[1]


@pytest.fixture(scope="session")
def engine(public_key: PublicKey, private_key: PrivateKey) -> Iterator[CryptoEngine]:
    """The key owner's engine on its own two-process pool, shut down at the end."""
    with CryptoEngine(public_key, private_key, workers=2) as eng:
        yield eng
