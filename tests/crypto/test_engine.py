"""The process-pool engine: correctness, key handling, and a free event loop."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from p2pboost.crypto import kernels
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.paillier import PrivateKey, PublicKey, generate_keypair
from p2pboost.exceptions import InputError, KeyMismatchError
from p2pboost.testing import time_factor
from p2pboost.workers import idle_threads_supported, pinned_pool


@pytest.mark.slow
def test_blocking_round_trip(engine: CryptoEngine, public_key: PublicKey) -> None:
    values = [0, 1, public_key.n - 1, *range(2, 300)]
    cts = engine.encrypt_batch_blocking(values)
    assert len(cts) == len(values)
    assert all(0 < c < public_key.n2 for c in cts)
    assert engine.decrypt_batch_blocking(cts) == values


def test_small_batches_run_inline(engine: CryptoEngine) -> None:
    cts = engine.encrypt_batch_blocking([5, 6])
    assert engine.decrypt_batch_blocking(cts) == [5, 6]


def test_numpy_input(engine: CryptoEngine) -> None:
    import numpy as np

    values = np.arange(100, dtype=np.int64)
    assert engine.decrypt_batch_blocking(engine.encrypt_batch_blocking(values)) == list(range(100))
    with pytest.raises(InputError):
        engine.encrypt_batch_blocking(np.zeros((2, 2), dtype=np.int64))


async def test_async_round_trip(engine: CryptoEngine) -> None:
    values = list(range(1000, 1500))
    cts = await engine.encrypt_batch(values)
    assert await engine.decrypt_batch(cts) == values
    assert await engine.encrypt_batch([]) == []


async def test_errors_in_workers_reach_the_caller(
    engine: CryptoEngine, public_key: PublicKey
) -> None:
    with pytest.raises(InputError):
        await engine.encrypt_batch([1] * 100 + [public_key.n])


def test_engine_without_private_key_cannot_decrypt(
    public_key: PublicKey, engine: CryptoEngine
) -> None:
    public_only = CryptoEngine(public_key, workers=1)
    cts = public_only.encrypt_batch_blocking([1, 2, 3])  # inline: no pool started
    assert engine.decrypt_batch_blocking(cts) == [1, 2, 3]
    with pytest.raises(KeyMismatchError):
        public_only.decrypt_batch_blocking(cts)
    public_only.close()


def test_mismatched_private_key_is_refused(public_key: PublicKey) -> None:
    _, other = generate_keypair(1024, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        CryptoEngine(public_key, other)


def test_caller_supplied_executor(public_key: PublicKey, private_key: PrivateKey) -> None:
    """A shared pool made before the key existed: the key is registered in its workers, the
    decryption tasks carry it, the others the public key; workers cache tables."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        eng = CryptoEngine(public_key, private_key, executor=pool, chunk_size=50)
        values = list(range(200))
        assert eng.decrypt_batch_blocking(eng.encrypt_batch_blocking(values)) == values
        eng.close()  # leaves the caller's pool alone
        assert pool.submit(sum, [1, 2]).result() == 3


def _has_table(fingerprint: bytes) -> bool:
    from p2pboost.crypto._workers import WORKER_KEYS

    state = WORKER_KEYS.get(fingerprint)
    return state is not None and state._table is not None


async def test_prepare_builds_the_table_in_every_worker(
    public_key: PublicKey, private_key: PrivateKey
) -> None:
    """Before the first encryption, not in it: each worker of the pool holds the key's table."""
    pool = pinned_pool(2)
    try:
        eng = CryptoEngine(public_key, private_key, executor=pool, workers=2)
        fp = public_key.fingerprint
        assert [pool.submit_to(i, _has_table, fp).result() for i in range(2)] == [False, False]
        assert await eng.prepare() == 2
        assert [pool.submit_to(i, _has_table, fp).result() for i in range(2)] == [True, True]
        assert await eng.prepare() == 2  # a cache hit, nothing rebuilt
        values = list(range(100))
        assert await eng.decrypt_batch(await eng.encrypt_batch(values)) == values
    finally:
        pool.shutdown()


async def test_event_loop_keeps_ticking_during_a_large_batch(engine: CryptoEngine) -> None:
    """A 10 ms ticker must never be more than 50 ms late while batches of 3000 values are
    encrypted (for at least 0.3 s: warm workers on a quiet machine finish one in 0.1 s)."""
    lateness: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        expected = loop.time()
        while not done.is_set():
            expected += 0.010
            await asyncio.sleep(max(0.0, expected - loop.time()))
            lateness.append(loop.time() - expected)

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    while True:
        cts = await engine.encrypt_batch(list(range(3000)))
        plain = await engine.decrypt_batch(cts[:500])
        elapsed = time.perf_counter() - start
        if elapsed > 0.3:
            break
    done.set()
    await task
    assert plain == list(range(500))
    assert len(lateness) >= 10
    assert max(lateness) < 0.050 * time_factor(), f"loop blocked for {max(lateness) * 1000:.1f} ms"


async def test_partial_sums_compress_on_the_pool_as_inline(
    engine: CryptoEngine, public_key: PublicKey
) -> None:
    import numpy as np

    from p2pboost.crypto.compress import compress
    from p2pboost.crypto.packing import PackingSpec
    from p2pboost.crypto.paillier import CiphertextBatch
    from p2pboost.gbdt.fixedpoint import choose_grid

    grid = choose_grid(np.array([1.0]), 100)
    spec = PackingSpec.for_grids(100, grid, grid, key_bits=public_key.bits)
    cts = engine.encrypt_batch_blocking(list(range(1, 101)))
    halves = (cts[:50], cts[50:])  # two partial sums of each split-info
    sums = [[a * b % public_key.n2] for a, b in zip(*halves, strict=True)]
    expected = compress(public_key, spec, sums)
    assert len(expected) == -(-50 // spec.split_infos_per_plaintext)
    parts = [CiphertextBatch.from_ciphertexts(public_key, h).data for h in halves]
    got = await engine.compress_parts(spec, parts)
    assert got == CiphertextBatch.from_ciphertexts(public_key, expected).data


async def test_fused_steps_round_trip(engine: CryptoEngine, public_key: PublicKey) -> None:
    """pack + encrypt in one task -> bytes; decrypt + unpack in (several) tasks -> the sums."""
    import numpy as np

    from p2pboost.crypto.packing import PackingSpec
    from p2pboost.crypto.paillier import CiphertextBatch
    from p2pboost.gbdt.fixedpoint import choose_grid

    rng = np.random.default_rng(3)
    n = 400
    g, h = rng.integers(-(2**20), 2**20, n), rng.integers(0, 2**20, n)
    grid = choose_grid(np.array([2.0**20]), n)
    spec = PackingSpec.for_grids(n, grid, grid, key_bits=public_key.bits)
    data = await engine.encrypt_packed(spec, g, h)
    assert len(data) == n * public_key.ciphertext_bytes
    parts = [data[: len(data) // 2], data[len(data) // 2 :]]
    infos = n // 2  # split-info i = rows i and i + 200 (two shards' partial sums)
    compressed = await engine.compress_parts(spec, parts)
    assert len(CiphertextBatch(public_key.fingerprint, public_key.ciphertext_bytes, compressed)) > 4
    counts = np.full(infos, 2, dtype=np.int64)
    G, H = await engine.open_split_infos(spec, compressed, counts)  # cut into pieces
    np.testing.assert_array_equal(G[:, 0], g[:infos] + g[infos:])
    np.testing.assert_array_equal(H[:, 0], h[:infos] + h[infos:])
    with pytest.raises(InputError):
        await engine.open_split_infos(spec, compressed[:-1], counts)


async def test_fused_steps_carry_vector_rows(engine: CryptoEngine, public_key: PublicKey) -> None:
    """Eleven outputs per row (a multi-output tree): two plaintexts per row under a 1024-bit
    key, encrypted row by row; a package of vector sums opens, whole or in pieces, to the
    exact sums of every output."""
    import numpy as np

    from p2pboost.crypto.compress import compressed_count
    from p2pboost.crypto.packing import PackingSpec
    from p2pboost.gbdt.fixedpoint import choose_grid

    rng = np.random.default_rng(5)
    n, k = 400, 11
    g, h = rng.integers(-(2**20), 2**20, (n, k)), rng.integers(0, 2**20, (n, k))
    grid = choose_grid(np.array([2.0**20]), n)
    spec = PackingSpec.for_grids(n, grid, grid, key_bits=public_key.bits, n_outputs=k)
    assert spec.plaintexts_per_row == 2
    data = await engine.encrypt_packed(spec, g, h)
    width = public_key.ciphertext_bytes
    assert len(data) == 2 * n * width  # a row's two planes, row after row
    half = len(data) // 2
    infos = n // 2  # split-info i = rows i and i + 200 (two shards' partial sums)
    compressed = await engine.compress_parts(spec, [data[:half], data[half:]])
    assert len(compressed) == compressed_count(spec, infos) * width < 2 * infos * width
    counts = np.full(infos, 2, dtype=np.int64)
    G, H = await engine.open_split_infos(spec, compressed, counts)
    np.testing.assert_array_equal(G, g[:infos] + g[infos:])
    np.testing.assert_array_equal(H, h[:infos] + h[infos:])


async def test_precomputed_factors_are_used_once(engine: CryptoEngine) -> None:
    made = await engine.precompute(300)
    assert 0 < made <= 300
    values = [7] * 400
    cts = await engine.encrypt_batch(values)
    assert len(set(cts)) == 400  # every ciphertext has its own randomiser
    assert await engine.decrypt_batch(cts) == values
    assert engine.precompute_blocking(0) == 0
    assert engine.precompute_blocking(64) == 64
    assert engine.decrypt_batch_blocking(engine.encrypt_batch_blocking([9] * 100)) == [9] * 100


async def test_stash_is_consumed_exactly(public_key: PublicKey, private_key: PrivateKey) -> None:
    """Each stashed randomiser serves one ciphertext: taken out before the task is sent."""
    eng = CryptoEngine(public_key, private_key, workers=1, stash_limit=10)
    try:
        assert await eng.precompute(25) == 10  # bounded
        assert eng.stashed == 10
        width = public_key.ciphertext_bytes
        first = eng._take(4)
        assert len(first) == 4 * width
        assert eng.stashed == 6
        rest = eng._take(100)
        assert len(rest) == 6 * width
        assert eng.stashed == 0
        assert eng._take(1) == b""
        factors = {first[i : i + width] for i in range(0, len(first), width)}
        assert len(factors | {rest[i : i + width] for i in range(0, len(rest), width)}) == 10
        assert eng.precompute_blocking(64) == 10
        cts = eng.encrypt_batch_blocking(list(range(100)))  # 10 with factors, 90 without
        assert eng.stashed == 0
        assert len(set(cts)) == 100
        assert eng.decrypt_batch_blocking(cts) == list(range(100))
    finally:
        eng.close()


async def test_idle_precompute_fills_the_stash_until_stopped(
    engine: CryptoEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Randomisers are made between the engine's own tasks, and it stops on request."""
    from p2pboost.crypto import engine as engine_module

    monkeypatch.setattr(engine_module, "spare_cpus", lambda: 2)
    stop = asyncio.Event()
    filler = asyncio.ensure_future(engine.precompute_while_idle(engine.stashed + 600, stop))
    values = list(range(2000, 2300))
    assert await engine.decrypt_batch(await engine.encrypt_batch(values)) == values
    while engine.stashed < 300:  # noqa: ASYNC110 - the stash has no event to wait on
        await asyncio.sleep(0.01)
    stop.set()
    made = await filler
    assert made >= 300
    before = engine.stashed
    cts = await engine.encrypt_batch(values)
    assert engine.stashed == before - len(values)
    assert await engine.decrypt_batch(cts) == values


async def test_idle_precompute_takes_only_spare_processors(
    engine: CryptoEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the pool (no idle scheduling class, or a kernel that holds the GIL): with every
    processor busy elsewhere nothing is made; once one is free, work starts."""
    from p2pboost.crypto import engine as engine_module

    spare = [0]
    monkeypatch.setattr(engine_module, "spare_cpus", lambda: spare[0])
    monkeypatch.setattr(engine_module, "idle_threads_supported", lambda: False)
    stop = asyncio.Event()
    start = engine.stashed
    filler = asyncio.ensure_future(engine.precompute_while_idle(start + 300, stop))
    await asyncio.sleep(0.3)
    assert engine.stashed == start
    spare[0] = 1
    while engine.stashed < start + 300:  # noqa: ASYNC110 - the stash has no event to wait on
        await asyncio.sleep(0.01)
    stop.set()
    assert await filler == 300


@pytest.mark.skipif(
    not (kernels.releases_gil() and idle_threads_supported()),
    reason="idle-class threads need the native kernel (GIL released) and Linux's SCHED_IDLE",
)
async def test_idle_precompute_runs_in_the_idle_class_under_the_native_kernel(
    engine: CryptoEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the native kernel the randomisers are made on the engine's idle-class threads,
    whatever the run queue says (the system's scheduler does the gating), even while the
    engine's own tasks run, and they decrypt as any."""
    from p2pboost.crypto import engine as engine_module

    monkeypatch.setattr(engine_module, "spare_cpus", lambda: 0)  # the pool path would wait
    stop = asyncio.Event()
    start = engine.stashed
    filler = asyncio.ensure_future(engine.precompute_while_idle(start + 400, stop))
    values = list(range(500))
    assert await engine.decrypt_batch(await engine.encrypt_batch(values)) == values
    deadline = time.monotonic() + 30 * time_factor()
    while engine.stashed < start + 400:
        assert time.monotonic() < deadline, "the idle-class threads never got a processor"
        await asyncio.sleep(0.01)
    stop.set()
    assert await filler >= 400  # and more where the encryptions above took some
    assert engine._background is not None
    assert engine._background._max_workers == engine.background_width  # type: ignore[attr-defined]
    policies = {engine._background.submit(os.sched_getscheduler, 0).result() for _ in range(4)}
    assert policies == {os.SCHED_IDLE}
    before, some = engine.stashed, values[:300]
    cts = await engine.encrypt_batch(some)
    assert engine.stashed == before - len(some)
    assert await engine.decrypt_batch(cts) == some


def test_no_more_idle_class_threads_than_cores(
    public_key: PublicKey, private_key: PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One background thread per worker, up to the cores: more could only wait (for a core,
    and for the GIL, which would hold up the event loop)."""
    from p2pboost.crypto import engine as engine_module

    monkeypatch.setattr(engine_module, "default_workers", lambda: 3)
    for workers, width in ((1, 1), (3, 3), (32, 3)):
        with CryptoEngine(public_key, private_key, workers=workers) as engine:
            assert engine.background_width == width


async def test_a_stopped_filling_leaves_its_running_tasks_to_land_later(
    public_key: PublicKey, private_key: PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping returns at once (a tree about to encrypt does not wait); a task still running
    then puts its randomisers in the stash when it ends."""
    from p2pboost.crypto import engine as engine_module
    from p2pboost.crypto._workers import factors_task as real

    started, release = threading.Event(), threading.Event()

    def held(fingerprint: bytes, material: object, count: int) -> bytes:
        started.set()
        release.wait(10)
        return real(fingerprint, material, count)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "factors_task", held)
    monkeypatch.setattr(engine_module, "spare_cpus", lambda: 2)
    pool = ThreadPoolExecutor(2)  # threads: the patched task runs as patched
    try:
        with CryptoEngine(public_key, private_key, executor=pool, workers=1) as eng:
            stop = asyncio.Event()
            filler = asyncio.ensure_future(eng.precompute_while_idle(1000, stop))
            while not started.is_set():  # noqa: ASYNC110 - a thread's event
                await asyncio.sleep(0.01)
            stop.set()
            assert await asyncio.wait_for(filler, 5) == 0  # not waited for
            assert eng.stashed == 0
            release.set()
            deadline = time.monotonic() + 10 * time_factor()
            while eng.stashed == 0:
                assert time.monotonic() < deadline, "the running task's randomisers never landed"
                await asyncio.sleep(0.01)
            assert eng.stashed == engine_module.IDLE_CHUNK
            values = list(range(50))
            assert eng.decrypt_batch_blocking(eng.encrypt_batch_blocking(values)) == values
    finally:
        release.set()
        pool.shutdown(wait=True)
