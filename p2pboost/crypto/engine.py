"""Batch encryption and decryption over all cores, with an asyncio face.

Why a process pool: a 2048-bit encryption is about a hundred modular multiplications of
2048-bit numbers and holds the GIL throughout, so threads would not help, and running it on the
event loop would freeze every connection of the node. :class:`PaillierEngine` cuts a batch into
chunks and sends them to worker processes; ``await engine.encrypt_batch(...)`` runs them through
``loop.run_in_executor`` and the loop stays free (the only loop-side work is slicing the input
and joining the results).

Key material reaches a worker once. With the engine's own pool it is installed by the pool's
``initializer``; a caller-supplied executor (say, the node's shared pool) was made before the
key existed, so then each task carries the *public* numbers (or, for decryption, the key's few
hundred bytes) and the worker caches what it derives from them (the fixed-base tables, tens of MiB,
the CRT constants) by fingerprint: built once per worker and key, never per task.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pboost.crypto.compress import compress_groups, compression_groups
from p2pboost.crypto.packing import PackingSpec
from p2pboost.crypto.paillier import FixedBaseTable, PrivateKey, PublicKey
from p2pboost.exceptions import InputError, KeyMismatchError
from p2pboost.workers import default_workers, process_pool

__all__ = ["PaillierEngine", "default_workers"]

#: Below this many values a batch is done in the calling thread by the blocking API.
INLINE_BELOW = 64
#: Largest chunk handed to one task: keeps pickled messages small and the pool balanced.
MAX_CHUNK = 2048
#: Chunks per worker per batch, so a slow worker does not hold up the end of a batch.
CHUNKS_PER_WORKER = 4
#: Worker-side cache size: keys a worker keeps tables for (LRU by insertion).
_CACHE_KEYS = 4
#: Most precomputed randomisers one worker keeps per key (64 MiB at 2048 bits).
STASH_LIMIT = 1 << 17


@dataclass(frozen=True, slots=True)
class _KeyMaterial:
    """What a worker needs: serialised keys (picklable, small)."""

    public: bytes
    private: bytes | None


class _WorkerKey:
    """Per-process state for one key: the parsed keys and the lazily built table."""

    def __init__(self, material: _KeyMaterial) -> None:
        self.public_key = PublicKey.from_bytes(material.public)
        self.private_key = PrivateKey.from_bytes(material.private) if material.private else None
        self._table: FixedBaseTable | None = None
        #: Randomisers made ahead of time (:meth:`PaillierEngine.precompute`); each is popped
        #: and used for exactly one ciphertext.
        self.stash: list[Any] = []

    @property
    def table(self) -> FixedBaseTable:
        if self._table is None:
            self._table = FixedBaseTable(self.public_key, self.private_key)
        return self._table


_WORKER_KEYS: dict[bytes, _WorkerKey] = {}


def _install(fingerprint: bytes, material: _KeyMaterial) -> _WorkerKey:
    state = _WORKER_KEYS.get(fingerprint)
    if state is None or (material.private is not None and state.private_key is None):
        state = _WorkerKey(material)
        if state.public_key.fingerprint != fingerprint:
            raise KeyMismatchError("key material does not match its fingerprint")
        while len(_WORKER_KEYS) >= _CACHE_KEYS:
            del _WORKER_KEYS[next(iter(_WORKER_KEYS))]
        _WORKER_KEYS[fingerprint] = state
    return state


def _init_worker(fingerprint: bytes, material: _KeyMaterial) -> None:
    """Pool initializer: parse the keys once and build the table before the first task."""
    _install(fingerprint, material).table  # noqa: B018 - build eagerly, off the critical path


def _state(fingerprint: bytes, material: _KeyMaterial | None) -> _WorkerKey:
    if material is not None:
        return _install(fingerprint, material)
    try:
        return _WORKER_KEYS[fingerprint]
    except KeyError:
        raise KeyMismatchError("worker has no key with this fingerprint") from None


def _encrypt_task(fingerprint: bytes, material: _KeyMaterial | None, plaintexts: list[int]) -> Any:
    state = _state(fingerprint, material)
    k = min(len(plaintexts), len(state.stash))
    if not k:
        return state.table.encrypt_many(plaintexts)
    factors = state.stash[-k:]
    del state.stash[-k:]  # popped before use: a randomiser never serves twice
    head = state.table.encrypt_with_factors(plaintexts[:k], factors)
    return head + state.table.encrypt_many(plaintexts[k:])


def _precompute_task(fingerprint: bytes, material: _KeyMaterial | None, count: int) -> int:
    state = _state(fingerprint, material)
    k = max(0, min(count, STASH_LIMIT - len(state.stash)))
    state.stash.extend(state.table.random_factors(k))
    return k


def _decrypt_task(fingerprint: bytes, material: _KeyMaterial | None, ciphertexts: list[Any]) -> Any:
    private_key = _state(fingerprint, material).private_key
    if private_key is None:
        raise KeyMismatchError("worker holds no private key for this fingerprint")
    decrypt = private_key.decrypt
    return [decrypt(c) for c in ciphertexts]


def _compress_task(fingerprint: bytes, material: _KeyMaterial | None, groups: list[Any]) -> Any:
    return compress_groups(_state(fingerprint, material).public_key.n2, groups)


class PaillierEngine:
    """Encrypt and decrypt batches of raw Paillier values on a process pool.

    ``executor``: run on this executor (not shut down by :meth:`close`); otherwise the engine
    starts its own pool of ``workers`` processes on first use, whose initializer installs the
    key material. The own pool uses the ``spawn`` start method (``fork`` is unsafe once the
    event loop and its threads run), so a script that uses it needs the usual
    ``if __name__ == "__main__":`` guard. With a caller's executor, each task carries the key
    blob (for a key owner: including ``p`` and ``q``; it goes only to local worker processes).

    Plaintexts are ints in ``[0, n)``; ciphertexts are ``gmpy2.mpz``. Batches below
    :data:`INLINE_BELOW` values run in the calling thread in the blocking API, never in the
    async one. Use as a (async) context manager or call :meth:`close`.
    """

    def __init__(
        self,
        public_key: PublicKey,
        private_key: PrivateKey | None = None,
        *,
        executor: Executor | None = None,
        workers: int | None = None,
        chunk_size: int | None = None,
    ) -> None:
        if private_key is not None and private_key.public_key != public_key:
            raise KeyMismatchError("private key does not belong to the public key")
        if workers is not None and workers < 1:
            raise InputError("workers must be at least 1")
        self.public_key = public_key
        self.private_key = private_key
        self.workers = workers or default_workers()
        self.chunk_size = chunk_size
        self._material = _KeyMaterial(
            public_key.to_bytes(), private_key.to_bytes() if private_key else None
        )
        self._external = executor
        self._own: ProcessPoolExecutor | None = None
        self._table: FixedBaseTable | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def _executor(self) -> tuple[Executor, _KeyMaterial | None]:
        """The executor and what each task must carry (nothing for our own initialised pool)."""
        if self._external is not None:
            return self._external, self._material
        if self._own is None:
            self._own = process_pool(
                self.workers,
                initializer=_init_worker,
                initargs=(self.public_key.fingerprint, self._material),
            )
        return self._own, None

    def close(self) -> None:
        """Shut down the engine's own pool (an executor passed in is left alone)."""
        if self._own is not None:
            self._own.shutdown(wait=True, cancel_futures=True)
            self._own = None

    def __enter__(self) -> PaillierEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> PaillierEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # --- chunking ------------------------------------------------------------------------------
    def _chunk_size(self, n: int) -> int:
        return self.chunk_size or max(
            1, min(MAX_CHUNK, math.ceil(n / (self.workers * CHUNKS_PER_WORKER)))
        )

    def _chunks(self, values: list[Any]) -> list[list[Any]]:
        size = self._chunk_size(len(values))
        return [values[i : i + size] for i in range(0, len(values), size)]

    def _chunk_sizes(self, n: int) -> list[int]:
        size = self._chunk_size(n)
        return [min(size, n - i) for i in range(0, n, size)]

    @staticmethod
    def _as_list(values: Sequence[int] | np.ndarray[Any, Any]) -> list[Any]:
        if isinstance(values, np.ndarray):
            if values.ndim != 1 or (values.dtype != object and values.dtype.kind not in "iu"):
                raise InputError("plaintexts must be a 1-d integer array")
            return list(values.tolist())
        return list(values)

    def _local_table(self) -> FixedBaseTable:
        # Small 8-bit tables here: the parent only encrypts tiny batches itself.
        if self._table is None:
            self._table = FixedBaseTable(self.public_key, self.private_key, window_bits=8)
        return self._table

    def _fingerprint(self) -> bytes:
        return self.public_key.fingerprint

    def _require_private(self) -> PrivateKey:
        if self.private_key is None:
            raise KeyMismatchError("this engine holds no private key")
        return self.private_key

    # --- blocking API (for worker threads, scripts and benchmarks) ----------------------------
    def encrypt_batch_blocking(self, values: Sequence[int] | np.ndarray[Any, Any]) -> list[Any]:
        """Encrypt ``values`` (ints in ``[0, n)``) and wait; never call this on the event loop."""
        plain = self._as_list(values)
        if len(plain) < INLINE_BELOW:
            return self._local_table().encrypt_many(plain)
        executor, material = self._executor()
        fn = functools.partial(_encrypt_task, self._fingerprint(), material)
        return [c for part in executor.map(fn, self._chunks(plain)) for c in part]

    def decrypt_batch_blocking(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Decrypt raw ciphertexts to plaintexts in ``[0, n)`` and wait."""
        private_key = self._require_private()
        cts = list(ciphertexts)
        if len(cts) < INLINE_BELOW:
            return [private_key.decrypt(c) for c in cts]
        executor, material = self._executor()
        fn = functools.partial(_decrypt_task, self._fingerprint(), material)
        return [m for part in executor.map(fn, self._chunks(cts)) for m in part]

    # --- async API -----------------------------------------------------------------------------
    async def _run_chunks(self, task: Any, chunks: list[Any]) -> list[Any]:
        """Run ``task(fingerprint, material, chunk)`` for every chunk; results in order."""
        if not chunks:
            return []
        loop = asyncio.get_running_loop()
        executor, material = self._executor()
        fn = functools.partial(task, self._fingerprint(), material)
        return list(
            await asyncio.gather(*(loop.run_in_executor(executor, fn, chunk) for chunk in chunks))
        )

    async def _run(self, task: Any, items: list[Any]) -> list[Any]:
        parts = await self._run_chunks(task, self._chunks(items))
        return [x for part in parts for x in part]

    async def encrypt_batch(self, values: Sequence[int] | np.ndarray[Any, Any]) -> list[Any]:
        """Encrypt ``values`` on the pool without blocking the event loop."""
        return await self._run(_encrypt_task, self._as_list(values))

    async def decrypt_batch(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Decrypt raw ciphertexts on the pool without blocking the event loop."""
        self._require_private()
        return await self._run(_decrypt_task, list(ciphertexts))

    async def precompute(self, count: int) -> int:
        """Make about ``count`` randomisers ahead of time in the workers; returns how many.

        Call it while the pool would otherwise idle (the guest waiting for histograms): later
        encryptions then cost one product each until the stashes run dry. Each worker keeps at
        most :data:`STASH_LIMIT`; a stash lives in the worker that made it, so with several
        workers a batch may still compute some factors itself.
        """
        if count <= 0:
            return 0
        return sum(await self._run_chunks(_precompute_task, self._chunk_sizes(count)))

    def precompute_blocking(self, count: int) -> int:
        """Blocking :meth:`precompute`."""
        if count <= 0:
            return 0
        executor, material = self._executor()
        fn = functools.partial(_precompute_task, self._fingerprint(), material)
        return sum(executor.map(fn, self._chunk_sizes(count)))

    async def compress_batch(self, spec: PackingSpec, sums: Sequence[Sequence[Any]]) -> list[Any]:
        """:func:`~p2pboost.crypto.compress.compress` on the pool (a host's split-infos)."""
        return await self._run(_compress_task, compression_groups(spec, sums))

    def compress_batch_blocking(
        self, spec: PackingSpec, sums: Sequence[Sequence[Any]]
    ) -> list[Any]:
        """Blocking :meth:`compress_batch`."""
        groups = compression_groups(spec, sums)
        if len(groups) < 4:
            return compress_groups(self.public_key.n2, groups)
        executor, material = self._executor()
        fn = functools.partial(_compress_task, self._fingerprint(), material)
        return [c for part in executor.map(fn, self._chunks(groups)) for c in part]
