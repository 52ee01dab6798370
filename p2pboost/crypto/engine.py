"""Batch encryption and decryption over all cores, with an asyncio face.

Why a process pool: a 2048-bit encryption is about a hundred modular multiplications of
2048-bit numbers and holds the GIL throughout, so threads would not help, and running it on the
event loop would freeze every connection of the node. :class:`CryptoEngine` cuts a batch into
chunks and sends them to worker processes; ``await engine.encrypt_batch(...)`` runs them through
``loop.run_in_executor`` and the loop stays free (the only loop-side work is slicing the input
and joining the results).

Key material reaches a worker once. With the engine's own pool it is installed by the pool's
``initializer``; a caller-supplied executor (say, the node's shared pool) was made before the
key existed, so then each task carries the *public* numbers (or, for decryption, the key's few
hundred bytes) and the worker caches what it derives from them (the fixed-base tables, tens of MiB,
the CRT constants) by fingerprint: built once per worker and key, never per task. The private
key travels only with the tasks that use it (secrets only where used), or, on this machine's own
processes, once per worker (:meth:`CryptoEngine._register`).

**Fused steps, bytes across the boundary.** Pickling a 2048-bit integer costs about as much as
a few modular products, and a list of them is rebuilt object by object on the other side. The
protocol's steps therefore each run as fused tasks whose inputs and outputs are numpy arrays
or fixed-width big-endian ciphertext bytes (what
:class:`~p2pboost.crypto.additive.CiphertextBatch` carries on the wire):
:meth:`CryptoEngine.encrypt_packed` (pack and encrypt a chunk of rows),
:meth:`CryptoEngine.open_split_infos` (decrypt and unpack a package) and
:meth:`CryptoEngine.compress_parts` (multiply partial sums and compress them).

**Every worker busy.** A step's work is cut so that no task holds more than about
``1 / (4 W)`` of a phase's work and none is too small to be worth its cost
(:mod:`p2pboost.crypto.pieces`): a chunk of the gradient stream is encrypted by up to one task
per worker, a package opened and compressed in runs of whole ciphertexts.

**Randomisers made ahead of time.** Most of an encryption's cost is the random factor
(Paillier's ``hs**a``, OU's ``h**r``); with a factor made earlier a Paillier encryption is one
product and an OU one is ``g**m`` (a short fixed-base exponent) and one product.
:meth:`CryptoEngine.precompute` makes factors on the pool and keeps them *in the engine* as
bytes (any worker can then use any of them, whatever executor runs the tasks), up to
``stash_limit``; every encryption takes its factors out of the stash before it is sent, so
a factor serves exactly one ciphertext, and deals them over its tasks in proportion to their
sizes (a task given all of them would finish far ahead of the others).
:meth:`CryptoEngine.precompute_while_idle` does it only while no other task of the engine is
in flight (the guest waiting for the hosts) and only on processors nobody else needs. The
worker side (key cache, tasks) is :mod:`p2pboost.crypto._workers`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from p2pboost.crypto import kernels
from p2pboost.crypto._workers import (
    KeyMaterial,
    compress_task,
    decrypt_task,
    encrypt_packed_task,
    encrypt_task,
    factors_task,
    init_worker,
    open_task,
    prepare_task,
)
from p2pboost.crypto.compress import compressed_count, cut_points
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, AnyTable, make_table
from p2pboost.crypto.packing import PackingSpec
from p2pboost.crypto.pieces import MIN_CIPHERTEXTS, cut, floor_for, on_cluster, task_bound
from p2pboost.exceptions import InputError, KeyMismatchError
from p2pboost.workers import (
    PinnedExecutor,
    default_workers,
    idle_threads,
    idle_threads_supported,
    process_pool,
    spare_cpus,
)

__all__ = ["CryptoEngine", "PaillierEngine", "default_workers"]

#: The tasks that need the private key (the others need the public key only).
_KEY_TASKS = (decrypt_task, open_task)

#: Below this many values a batch is done in the calling thread by the blocking API.
INLINE_BELOW = 64
#: Largest chunk handed to one task: keeps pickled messages small and the pool balanced.
MAX_CHUNK = 2048
#: Chunks per worker per batch, so a slow worker does not hold up the end of a batch.
CHUNKS_PER_WORKER = 4
#: Bytes of randomisers an engine keeps by default (131,072 factors at 2048 bits).
STASH_BYTES = 64 * 1024 * 1024
#: Randomisers per background task: short tasks, so real work never waits long behind one.
IDLE_CHUNK = 128
#: Seconds between looks for spare processors while background work waits for one.
SPARE_POLL = 0.01
#: Fewest compressed ciphertexts worth a task of their own when a package is opened.
MIN_OPEN_PIECE = 4

I64 = npt.NDArray[np.int64]


class CryptoEngine:
    """Encrypt and decrypt batches of raw Paillier or Okamoto-Uchiyama values on a process
    pool (the scheme is the key's: :mod:`p2pboost.crypto.keys`).

    ``executor``: run on this executor (not shut down by :meth:`close`); otherwise the engine
    starts its own pool of ``workers`` processes on first use, whose initializer installs the
    key material. The own pool uses the ``spawn`` start method (``fork`` is unsafe once the
    event loop and its threads run), so a script that uses it needs the usual
    ``if __name__ == "__main__":`` guard. With a caller's executor, whatever it is, only the
    tasks that use the private key (decryption and opening packages) carry it; encryption,
    randomisers and compression carry the public key. On an executor of this machine's own
    processes (a process or thread pool, a local pinned pool) the key owner's key is also
    registered once in every worker, so that its encryptions keep their CRT tables; on any
    other executor (a Dask client, loky, MPI: tasks may reach other machines) it is not. On a
    cluster (a :class:`~p2pboost.workers.PinnedExecutor` whose
    :meth:`~p2pboost.workers.PinnedExecutor.keyholder` is another executor) the key tasks
    run on the keyholder and only the public key goes to the cluster's workers.

    Plaintexts are ints in ``[0, n)``; ciphertexts are ``gmpy2.mpz``, or fixed-width bytes for
    the fused steps. Batches below :data:`INLINE_BELOW` values run in the calling thread in the
    blocking API, never in the async one. ``stash_limit`` bounds the randomisers kept ahead of
    time (default :data:`STASH_BYTES` worth). Use as a (async) context manager or call
    :meth:`close`.
    """

    def __init__(
        self,
        public_key: AnyPublicKey,
        private_key: AnyPrivateKey | None = None,
        *,
        executor: Executor | None = None,
        workers: int | None = None,
        chunk_size: int | None = None,
        stash_limit: int | None = None,
    ) -> None:
        if private_key is not None and private_key.public_key != public_key:
            raise KeyMismatchError("private key does not belong to the public key")
        if workers is not None and workers < 1:
            raise InputError("workers must be at least 1")
        if stash_limit is not None and stash_limit < 0:
            raise InputError("stash_limit must be >= 0")
        self.public_key = public_key
        self.private_key = private_key
        self.workers = workers or default_workers()
        self.chunk_size = chunk_size
        self.stash_limit = (
            STASH_BYTES // public_key.ciphertext_bytes if stash_limit is None else stash_limit
        )
        self._material = KeyMaterial(
            public_key.to_bytes(),
            private_key.to_bytes() if private_key else None,
            public_key.scheme,
        )
        self._public_material = KeyMaterial(public_key.to_bytes(), None, public_key.scheme)
        self._external = executor
        self._own: Executor | None = None
        self._background: Executor | None = None
        self._table: AnyTable | None = None
        self._stash: deque[bytes] = deque()
        self._stashed = 0
        self._lock = threading.Lock()
        self._busy = 0  # tasks of the async API in flight (event-loop thread only)
        self._idle: asyncio.Event | None = None
        self._registered = False  # the private key installed in the caller's workers

    # --- lifecycle -----------------------------------------------------------------------------
    def _executor(self, task: Any = None) -> tuple[Executor, KeyMaterial | None]:
        """The executor for ``task`` and what it must carry (nothing for our own initialised
        pool): the private key for the tasks that use it (:data:`_KEY_TASKS`, on a cluster its
        keyholder), the public key for every other task.

        Why not the whole key everywhere: the executor may send its tasks to other machines
        (a Dask client, loky, MPI), and encryption, randomisers and compression need only the
        public numbers. On this machine's own processes the key is registered once per worker
        instead (:meth:`_register`), so the owner's encryptions keep their CRT tables.
        """
        external = self._external
        if external is None:
            if self._own is None:
                self._own = process_pool(
                    self.workers,
                    initializer=init_worker,
                    initargs=(self.public_key.fingerprint, self._material),
                    prefer_threads=kernels.releases_gil(),
                )
            return self._own, None
        if task in _KEY_TASKS:
            if isinstance(external, PinnedExecutor):
                return external.keyholder(), self._material
            return external, self._material
        self._register()
        return external, self._public_material

    def _registrar(self) -> Executor | None:
        """The caller's executor when its workers may each hold the private key: this
        machine's own processes or threads (a process or thread pool, a pinned pool that is its
        own keyholder, or a cluster the party trusts with the key); None otherwise (an executor
        that may reach other machines, or an engine without a private key)."""
        external = self._external
        if self.private_key is None or external is None:
            return None
        if isinstance(external, PinnedExecutor):
            return external if external.keyholder() is external else None
        if isinstance(external, ProcessPoolExecutor | ThreadPoolExecutor):
            return external
        return None

    def _register(self) -> list[Future[int]]:
        """Install the private key in every worker of :meth:`_registrar`, once per engine;
        the key owner's encryptions then run on its CRT tables (about twice as fast) while
        their tasks carry only the public key.

        Not waited for: the tasks are queued ahead of the encryptions that follow them, and a
        worker missed (a pool that gives two of them to one worker) encrypts with the public
        key alone, correctly and slower. A pinned pool is addressed worker by worker.
        """
        with self._lock:
            if self._registered:
                return []
            self._registered = True
        registrar = self._registrar()
        if registrar is None:
            return []
        fingerprint = self._fingerprint()
        if isinstance(registrar, PinnedExecutor):
            return [
                registrar.submit_to(i, prepare_task, fingerprint, self._material)
                for i in range(registrar.workers)
            ]
        return [
            registrar.submit(prepare_task, fingerprint, self._material) for _ in range(self.workers)
        ]

    @property
    def background_width(self) -> int:
        """How many idle-class threads make randomisers ahead: one per worker, but no more than
        the cores this process may run on.

        Why the cap: a thread beyond the cores can only ever run instead of another idle-class
        thread, and each one, when its task ends, waits for the GIL at the lowest priority.
        CPython hands the GIL to a thread that has waited for it and makes the thread that
        drops it wait until the other has taken it, so every such waiter can hold up the event
        loop for as long as the idle class goes without a core. Measured (synth150k, OU-2048,
        the parties cut for 32 workers on two cores, 3 alternated pairs): the parties' own
        time on the predicted critical path at 32 workers 0.128-0.155 s per tree with two
        threads against 0.159-0.176 s with 32."""
        return min(self.workers, default_workers())

    def _background_threads(self) -> Executor | None:
        """The engine's idle-class threads for randomisers made ahead (started on first use),
        or None where they would not help: a kernel that holds the GIL, or no idle class."""
        if not (kernels.releases_gil() and idle_threads_supported()):
            return None
        if self._background is None:
            self._background = idle_threads(
                self.background_width,
                initializer=init_worker,
                initargs=(self.public_key.fingerprint, self._material),
            )
        return self._background

    def close(self) -> None:
        """Shut down the engine's own pool and background threads (an executor passed in is
        left alone)."""
        if self._own is not None:
            self._own.shutdown(wait=True, cancel_futures=True)
            self._own = None
        if self._background is not None:
            self._background.shutdown(wait=True, cancel_futures=True)
            self._background = None

    def __enter__(self) -> CryptoEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CryptoEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    async def prepare(self) -> int:
        """Install the key and build its fixed-base table in every worker now; returns how many
        worker processes hold it.

        Why: a worker builds the table the first time it encrypts under a key (at 1024 bits
        about 0.2 s of one core for the key owner's CRT tables, 0.3 s at 2048), so without this
        the first tree of a training pays for it. A party that has its keys before its partners
        are ready (or keeps them and its pool between trainings: the tables are cached per key)
        calls this ahead and the first tree runs at the pace of the others. One task per
        worker: a :class:`~p2pboost.workers.PinnedExecutor` is addressed worker by worker; on
        another executor the tasks start together on idle workers, so each takes one in all
        likelihood (a worker missed builds its table on its first encryption, as without this).
        """
        loop = asyncio.get_running_loop()
        registered = self._register()
        if registered:  # the registration builds the owner's tables: nothing more to send
            return len(set(await asyncio.gather(*map(asyncio.wrap_future, registered))))
        executor, material = self._executor()
        fingerprint = self._fingerprint()
        if isinstance(executor, PinnedExecutor):
            futures = [
                asyncio.wrap_future(executor.submit_to(i, prepare_task, fingerprint, material))
                for i in range(executor.workers)
            ]
        else:
            futures = [
                loop.run_in_executor(executor, prepare_task, fingerprint, material)
                for _ in range(self.workers)
            ]
        return len(set(await asyncio.gather(*futures)))

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

    def _local_table(self) -> AnyTable:
        # Small 8-bit tables here: the parent only encrypts tiny batches itself.
        if self._table is None:
            self._table = make_table(self.public_key, self.private_key, window_bits=8)
        return self._table

    def _fingerprint(self) -> bytes:
        return self.public_key.fingerprint

    def _require_private(self) -> AnyPrivateKey:
        if self.private_key is None:
            raise KeyMismatchError("this engine holds no private key")
        return self.private_key

    # --- the stash of randomisers --------------------------------------------------------------
    @property
    def stashed(self) -> int:
        """Randomisers made ahead of time and not used yet."""
        return self._stashed

    def _put(self, factors: bytes) -> int:
        width = self.public_key.ciphertext_bytes
        with self._lock:
            k = max(0, min(len(factors) // width, self.stash_limit - self._stashed))
            if k:
                self._stash.append(factors[: k * width])
                self._stashed += k
        return k

    def _take(self, count: int) -> bytes:
        """Remove up to ``count`` randomisers from the stash (they are never handed out again)."""
        width = self.public_key.ciphertext_bytes
        parts = []
        with self._lock:
            while count > 0 and self._stash:
                block = self._stash.popleft()
                k = min(count, len(block) // width)
                parts.append(block[: k * width])
                if k * width < len(block):
                    self._stash.appendleft(block[k * width :])
                self._stashed -= k
                count -= k
        return b"".join(parts)

    def _split_factors(self, sizes: list[int]) -> list[bytes]:
        """One slice of the stash per task of ``sizes`` values, the stash's randomisers dealt
        in proportion to the sizes when it holds fewer than they need (so the tasks stay
        equally long: a value with a stashed factor costs a fraction of one without). Each
        factor is taken out once and goes to one task only."""
        total = sum(sizes)
        factors = self._take(total)
        width = self.public_key.ciphertext_bytes
        have = len(factors) // width
        if have == total:
            shares = list(sizes)
        else:
            shares = [have * k // total for k in sizes]
            rest = have - sum(shares)
            for i, k in enumerate(sizes):
                if rest == 0:
                    break
                if shares[i] < k:
                    shares[i] += 1
                    rest -= 1
        out, at = [], 0
        for k in shares:
            out.append(factors[at * width : (at + k) * width])
            at += k
        return out

    # --- blocking API (for worker threads, scripts and benchmarks) ----------------------------
    def encrypt_batch_blocking(self, values: Sequence[int] | np.ndarray[Any, Any]) -> list[Any]:
        """Encrypt ``values`` (ints in ``[0, n)``) and wait; never call this on the event loop."""
        plain = self._as_list(values)
        if len(plain) < INLINE_BELOW:
            return self._local_table().encrypt_many(plain)
        executor, material = self._executor()
        chunks = self._chunks(plain)
        factors = self._split_factors([len(c) for c in chunks])
        fn = functools.partial(encrypt_task, self._fingerprint(), material)
        return [c for part in executor.map(fn, chunks, factors) for c in part]

    def decrypt_batch_blocking(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Decrypt raw ciphertexts to plaintexts in ``[0, n)`` and wait."""
        private_key = self._require_private()
        cts = list(ciphertexts)
        if len(cts) < INLINE_BELOW:
            return [private_key.decrypt(c) for c in cts]
        executor, material = self._executor(decrypt_task)
        fn = functools.partial(decrypt_task, self._fingerprint(), material)
        return [m for part in executor.map(fn, self._chunks(cts)) for m in part]

    def precompute_blocking(self, count: int) -> int:
        """Blocking :meth:`precompute`."""
        sizes = self._chunk_sizes(max(0, min(count, self.stash_limit - self._stashed)))
        if not sizes:
            return 0
        executor, material = self._executor(factors_task)
        fn = functools.partial(factors_task, self._fingerprint(), material)
        return sum(self._put(part) for part in executor.map(fn, sizes))

    # --- async API -----------------------------------------------------------------------------
    async def _call(self, task: Any, *args: Any) -> Any:
        """Run ``task(fingerprint, material, *args)`` on the pool, counted as engine work."""
        loop = asyncio.get_running_loop()
        executor, material = self._executor(task)
        self._busy += 1
        if self._idle is not None:
            self._idle.clear()
        try:
            return await loop.run_in_executor(executor, task, self._fingerprint(), material, *args)
        finally:
            self._busy -= 1
            if self._busy == 0 and self._idle is not None:
                self._idle.set()

    async def _run(self, task: Any, chunks: list[Any], *extra: list[Any]) -> list[Any]:
        """``task`` over every chunk (with the matching item of each ``extra`` list), joined."""
        parts = await asyncio.gather(
            *(self._call(task, chunk, *(e[i] for e in extra)) for i, chunk in enumerate(chunks))
        )
        return [x for part in parts for x in part]

    async def encrypt_batch(self, values: Sequence[int] | np.ndarray[Any, Any]) -> list[Any]:
        """Encrypt ``values`` on the pool without blocking the event loop."""
        chunks = self._chunks(self._as_list(values))
        factors = self._split_factors([len(c) for c in chunks])
        return await self._run(encrypt_task, chunks, factors)

    async def decrypt_batch(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Decrypt raw ciphertexts on the pool without blocking the event loop."""
        self._require_private()
        return await self._run(decrypt_task, self._chunks(list(ciphertexts)))

    def piece_cuts(self, rows: int, per_row: int = 1, stream_rows: int | None = None) -> list[int]:
        """Where :meth:`encrypt_packed` cuts a chunk of ``rows`` rows of ``per_row``
        ciphertexts each (:func:`~p2pboost.crypto.pieces.cut`): none under
        :data:`~p2pboost.crypto.pieces.MIN_CIPHERTEXTS` ciphertexts and, given the rows of the
        whole stream, none over ``1 / (4 W)`` of them; on a local pool also one piece per
        worker, so that a chunk is ready in about ``1 / W`` of one task's time.

        On a Dask cluster only the bound cuts (with a floor four times larger): a task there
        costs milliseconds of the scheduler's time, one after another, so a chunk already
        within the bound is not spread further (a million-row tree on 8 workers stays at one
        task per chunk; on 128 workers a 16,384-row chunk is 9 pieces, not 16).
        """
        floor = floor_for(self._external, MIN_CIPHERTEXTS)
        spread = 1 if on_cluster(self._external) else self.workers
        largest = None if stream_rows is None else task_bound(stream_rows, self.workers)
        return cut(rows, spread, minimum=-(-floor // max(1, per_row)), largest=largest)

    async def encrypt_packed(
        self, spec: PackingSpec, g: I64, h: I64, *, stream_rows: int | None = None
    ) -> bytes:
        """Pack rows of integer-form ``g``, ``h`` (``(rows,)`` or ``(rows, outputs)``) and
        encrypt them, using stashed randomisers first; returns the ciphertexts as fixed-width
        bytes, row by row (a row's ``spec.plaintexts_per_row`` planes in order).

        The caller decides the chunking of its stream (a chunk of rows per call); the engine
        cuts each chunk into pieces of whole rows (:meth:`piece_cuts`), one task each, run at
        once and joined in order, so a chunk takes about ``1 / W`` of the time one task would.
        ``stream_rows``: the rows of the whole stream the chunk belongs to (a tree's), so that
        no piece holds more than ``1 / (4 W)`` of them whatever the chunk's size.
        """
        planes = spec.plaintexts_per_row
        cuts = self.piece_cuts(len(g), planes, stream_rows)
        bounds = list(itertools.pairwise(cuts)) or [(0, 0)]
        factors = self._split_factors([(b - a) * planes for a, b in bounds])
        if len(bounds) == 1:
            return cast(bytes, await self._call(encrypt_packed_task, spec, g, h, factors[0]))
        parts = await asyncio.gather(
            *(
                self._call(encrypt_packed_task, spec, g[a:b], h[a:b], f)
                for (a, b), f in zip(bounds, factors, strict=True)
            )
        )
        return b"".join(parts)

    async def open_split_infos(
        self, spec: PackingSpec, data: bytes, counts: I64
    ) -> tuple[I64, I64]:
        """Decrypt and unpack a compressed package (:func:`~p2pboost.crypto.compress.
        open_split_infos`), cut into pieces of whole ciphertexts that run in parallel.

        Raises :class:`~p2pboost.exceptions.CodecError` for a ciphertext outside
        ``(0, modulus)`` and :class:`~p2pboost.exceptions.CryptoError` for sums that cannot be.
        """
        self._require_private()
        n = int(counts.size)
        width = self.public_key.ciphertext_bytes
        if len(data) != compressed_count(spec, n) * width:
            raise InputError("package size does not match its split-infos")
        if n == 0:
            empty = np.zeros((0, spec.n_outputs), dtype=np.int64)
            return empty, empty.copy()
        pieces = max(1, min(self.workers, compressed_count(spec, n) // MIN_OPEN_PIECE))
        cuts = cut_points(spec, n, pieces)
        if len(cuts) <= 2:
            return cast(tuple[I64, I64], await self._call(open_task, spec, data, counts))
        parts = await asyncio.gather(
            *(
                self._call(
                    open_task,
                    spec,
                    data[compressed_count(spec, a) * width : compressed_count(spec, b) * width],
                    counts[a:b],
                )
                for a, b in itertools.pairwise(cuts)
            )
        )
        return (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
        )

    async def compress_parts(self, spec: PackingSpec, parts: Sequence[bytes]) -> bytes:
        """Multiply the partial sums of each split-info across ``parts`` and compress them
        (:func:`~p2pboost.crypto.compress.compress_parts`), in pieces that run in parallel."""
        width = self.public_key.ciphertext_bytes * spec.plaintexts_per_row  # per split-info
        n = len(parts[0]) // width if parts else 0
        cuts = cut_points(spec, n, self.workers)
        out = await asyncio.gather(
            *(
                self._call(compress_task, spec, [p[a * width : b * width] for p in parts])
                for a, b in itertools.pairwise(cuts)
            )
        )
        return b"".join(out)

    async def precompute(self, count: int) -> int:
        """Make about ``count`` randomisers ahead of time; returns how many were stashed.

        Later encryptions (:meth:`encrypt_batch`, :meth:`encrypt_packed` and the blocking
        form) then cost one product per value until the stash runs dry. At most
        ``stash_limit`` are kept.
        """
        sizes = self._chunk_sizes(max(0, min(count, self.stash_limit - self._stashed)))
        made = await asyncio.gather(*(self._call(factors_task, k) for k in sizes))
        return sum(self._put(part) for part in made)

    def _spare_slots(self, running: int) -> int:
        """How many background tasks may run now: the engine's workers, but no more than the
        processors nobody else needs (our own background tasks count as spare, they yield)."""
        spare = spare_cpus()
        if spare is None:
            return self.workers
        return max(0, min(self.workers, spare + running))

    async def precompute_while_idle(self, target: int, stop: asyncio.Event) -> int:
        """Fill the stash towards ``target`` randomisers while the engine has nothing else to
        do and the machine has spare processors, until ``stop`` is set; returns how many were
        made.

        Short tasks (:data:`IDLE_CHUNK` randomisers). Where the kernel releases the GIL and the
        system has an idle scheduling class (Linux), they run on the engine's own background
        threads in that class (:func:`~p2pboost.workers.idle_threads`), one per worker up to
        the cores (:attr:`background_width`), all the time: the system's scheduler runs them
        only on processors nothing else wants, so they fill even the short gaps while the
        engine's own tasks wait on the hosts, and give way at once. Otherwise they run on the
        pool, only while no other task of this engine is in flight, so real work waits at most
        one short task; and, where the kernel says how many tasks are runnable
        (:func:`~p2pboost.workers.spare_cpus`), no more of them than there are idle processors,
        polled every :data:`SPARE_POLL` seconds: on a machine shared with the hosts they take
        only what the hosts leave, since the pool's workers run at the same priority as theirs.
        Tasks still running when ``stop`` is set are not waited for: they finish, and their
        randomisers land in the stash when they do (the tree that stopped the filling starts
        encrypting at once, and takes them if they come in time)."""
        loop_idle = self._idle = asyncio.Event()
        # In the idle scheduling class the system's scheduler does the gating: no need to
        # wait for the engine to idle, nor to poll for spare processors.
        background = self._background_threads()
        if self._busy == 0 or background is not None:
            loop_idle.set()
        made = 0
        executor, material = self._executor() if background is None else (background, None)
        width = self.workers if background is None else self.background_width  # asked once
        loop = asyncio.get_running_loop()
        running: set[asyncio.Future[bytes]] = set()
        try:
            while True:
                room = min(target, self.stash_limit) - self._stashed - IDLE_CHUNK * len(running)
                if stop.is_set() or (room <= 0 and not running):
                    break
                wanted = room > 0 and loop_idle.is_set() and len(running) < width
                slots = width if background is not None else self._spare_slots(len(running))
                if wanted and len(running) < slots:
                    running.add(
                        loop.run_in_executor(
                            executor,
                            factors_task,
                            self._fingerprint(),
                            material,
                            min(IDLE_CHUNK, room),
                        )
                    )
                    continue
                waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
                if not loop_idle.is_set():
                    waiters.append(asyncio.ensure_future(loop_idle.wait()))
                try:
                    pending: list[asyncio.Future[Any]] = [*running, *waiters]
                    await asyncio.wait(
                        pending,
                        timeout=SPARE_POLL if wanted and background is None else None,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    for w in waiters:
                        w.cancel()
                for fut in [f for f in running if f.done()]:
                    running.discard(fut)
                    made += self._put(fut.result())
            # Stopped: what still runs finishes in its worker and lands in the stash then; the
            # caller (a tree about to encrypt) does not wait for it.
            for fut in running:
                fut.add_done_callback(self._land)
            running.clear()
        finally:
            for fut in running:
                fut.cancel()
            if self._idle is loop_idle:
                self._idle = None
        return made

    def _land(self, fut: asyncio.Future[bytes]) -> None:
        """Stash the randomisers of a background task that ended after its filling stopped."""
        if not fut.cancelled() and fut.exception() is None:
            self._put(fut.result())


#: The engine's name before it served two schemes (kept for existing imports).
PaillierEngine = CryptoEngine
