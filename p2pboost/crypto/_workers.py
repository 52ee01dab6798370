"""The worker side of :class:`~p2pboost.crypto.engine.CryptoEngine`: key cache and tasks.

Everything here runs in worker processes: module-level functions (picklable by reference)
over a per-process cache of keys and their fixed-base tables, one task per fused step with
numpy arrays or fixed-width ciphertext bytes in and out (see :mod:`p2pboost.crypto.engine`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from gmpy2 import mpz  # type: ignore[import-untyped]

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.compress import compress_parts, open_split_infos
from p2pboost.crypto.encryptors import Encryptor, make_encryptor
from p2pboost.crypto.keys import (
    AnyPrivateKey,
    AnyPublicKey,
    private_key_from_bytes,
    public_key_from_bytes,
)
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.exceptions import InputError, KeyMismatchError

__all__ = [
    "KeyMaterial",
    "compress_task",
    "decrypt_task",
    "encrypt_packed_task",
    "encrypt_task",
    "factors_task",
    "init_worker",
    "open_task",
    "prepare_task",
]

#: Worker-side cache size: keys a worker keeps tables for (LRU by insertion).
_CACHE_KEYS = 4

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class KeyMaterial:
    """What a worker needs: the scheme and serialised keys (picklable, small)."""

    public: bytes
    private: bytes | None
    scheme: str = "paillier"


class WorkerKey:
    """Per-process state for one key: the parsed keys and the lazily built encryptor (its
    fixed-base tables, for the kernel of the process: :mod:`p2pboost.crypto.encryptors`)."""

    def __init__(self, material: KeyMaterial) -> None:
        self.public_key: AnyPublicKey = public_key_from_bytes(material.scheme, material.public)
        self.private_key: AnyPrivateKey | None = (
            private_key_from_bytes(material.scheme, material.private) if material.private else None
        )
        self._table: Encryptor | None = None

    @property
    def table(self) -> Encryptor:
        if self._table is None:
            self._table = make_encryptor(self.public_key, self.private_key)
        return self._table

    def require_private(self) -> AnyPrivateKey:
        if self.private_key is None:
            raise KeyMismatchError("worker holds no private key for this fingerprint")
        return self.private_key

    def encrypt(self, plaintexts: Sequence[int], factors: bytes) -> bytes:
        """Encrypt to ciphertext bytes, the first ``len(factors) // width`` values with those
        factors (each used once)."""
        width = self.public_key.ciphertext_bytes
        if len(factors) % width or len(factors) // width > len(plaintexts):
            raise InputError("more randomisers than plaintexts")
        return self.table.encrypt(plaintexts, factors)


WORKER_KEYS: dict[bytes, WorkerKey] = {}


def install(fingerprint: bytes, material: KeyMaterial) -> WorkerKey:
    state = WORKER_KEYS.get(fingerprint)
    if state is None or (material.private is not None and state.private_key is None):
        state = WorkerKey(material)
        if state.public_key.fingerprint != fingerprint:
            raise KeyMismatchError("key material does not match its fingerprint")
        while len(WORKER_KEYS) >= _CACHE_KEYS:
            del WORKER_KEYS[next(iter(WORKER_KEYS))]
        WORKER_KEYS[fingerprint] = state
    return state


def init_worker(fingerprint: bytes, material: KeyMaterial) -> None:
    """Pool initializer: parse the keys once and build the table before the first task."""
    install(fingerprint, material).table  # noqa: B018 - build eagerly, off the critical path


def worker_key(fingerprint: bytes, material: KeyMaterial | None) -> WorkerKey:
    if material is not None:
        return install(fingerprint, material)
    try:
        return WORKER_KEYS[fingerprint]
    except KeyError:
        raise KeyMismatchError("worker has no key with this fingerprint") from None


# --- tasks ----------------------------------------------------------------------------------
def encrypt_task(
    fingerprint: bytes, material: KeyMaterial | None, plaintexts: list[int], factors: bytes
) -> list[Any]:
    state = worker_key(fingerprint, material)
    pk = state.public_key
    return CiphertextBatch.of(pk, state.encrypt(plaintexts, factors)).ciphertexts(pk)


def encrypt_packed_task(
    fingerprint: bytes,
    material: KeyMaterial | None,
    spec: PackingSpec,
    g: I64,
    h: I64,
    factors: bytes,
) -> bytes:
    """Pack rows of integer g/h, encrypt, return ciphertext bytes (a row's planes in order)."""
    state = worker_key(fingerprint, material)
    planes = pack(spec, g, h)
    rows = planes[0] if len(planes) == 1 else [v for row in zip(*planes, strict=True) for v in row]
    return state.encrypt(rows, factors)


def prepare_task(fingerprint: bytes, material: KeyMaterial | None) -> int:
    """Build the key's table in this worker now (a cache hit when it is there); its pid."""
    worker_key(fingerprint, material).table  # noqa: B018 - built for the tasks to come
    return os.getpid()


def factors_task(fingerprint: bytes, material: KeyMaterial | None, count: int) -> bytes:
    return worker_key(fingerprint, material).table.factors(count)


def decrypt_task(fingerprint: bytes, material: KeyMaterial | None, ciphertexts: list[Any]) -> Any:
    private_key = worker_key(fingerprint, material).require_private()
    pk = private_key.public_key
    cts = CiphertextBatch.from_ciphertexts(pk, ciphertexts).residues(pk)
    return [mpz(m) for m in kernels.decrypt(private_key, cts)]


def open_task(
    fingerprint: bytes, material: KeyMaterial | None, spec: PackingSpec, data: bytes, counts: I64
) -> tuple[I64, I64]:
    private_key = worker_key(fingerprint, material).require_private()
    return open_split_infos(private_key, spec, data, counts)


def compress_task(
    fingerprint: bytes, material: KeyMaterial | None, spec: PackingSpec, parts: list[bytes]
) -> bytes:
    return compress_parts(worker_key(fingerprint, material).public_key, spec, parts)
