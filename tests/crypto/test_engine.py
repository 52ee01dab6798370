"""The process-pool engine: correctness, key handling, and a free event loop."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from p2pboost.crypto.engine import PaillierEngine
from p2pboost.crypto.paillier import PrivateKey, PublicKey, generate_keypair
from p2pboost.exceptions import InputError, KeyMismatchError
from p2pboost.testing import time_factor


@pytest.mark.slow
def test_blocking_round_trip(engine: PaillierEngine, public_key: PublicKey) -> None:
    values = [0, 1, public_key.n - 1, *range(2, 300)]
    cts = engine.encrypt_batch_blocking(values)
    assert len(cts) == len(values)
    assert all(0 < c < public_key.n2 for c in cts)
    assert engine.decrypt_batch_blocking(cts) == values


def test_small_batches_run_inline(engine: PaillierEngine) -> None:
    cts = engine.encrypt_batch_blocking([5, 6])
    assert engine.decrypt_batch_blocking(cts) == [5, 6]


def test_numpy_input(engine: PaillierEngine) -> None:
    import numpy as np

    values = np.arange(100, dtype=np.int64)
    assert engine.decrypt_batch_blocking(engine.encrypt_batch_blocking(values)) == list(range(100))
    with pytest.raises(InputError):
        engine.encrypt_batch_blocking(np.zeros((2, 2), dtype=np.int64))


async def test_async_round_trip(engine: PaillierEngine) -> None:
    values = list(range(1000, 1500))
    cts = await engine.encrypt_batch(values)
    assert await engine.decrypt_batch(cts) == values
    assert await engine.encrypt_batch([]) == []


async def test_errors_in_workers_reach_the_caller(
    engine: PaillierEngine, public_key: PublicKey
) -> None:
    with pytest.raises(InputError):
        await engine.encrypt_batch([1] * 100 + [public_key.n])


def test_engine_without_private_key_cannot_decrypt(
    public_key: PublicKey, engine: PaillierEngine
) -> None:
    public_only = PaillierEngine(public_key, workers=1)
    cts = public_only.encrypt_batch_blocking([1, 2, 3])  # inline: no pool started
    assert engine.decrypt_batch_blocking(cts) == [1, 2, 3]
    with pytest.raises(KeyMismatchError):
        public_only.decrypt_batch_blocking(cts)
    public_only.close()


def test_mismatched_private_key_is_refused(public_key: PublicKey) -> None:
    _, other = generate_keypair(1024, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        PaillierEngine(public_key, other)


def test_caller_supplied_executor(public_key: PublicKey, private_key: PrivateKey) -> None:
    """A shared pool made before the key existed: tasks carry the key, workers cache tables."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        eng = PaillierEngine(public_key, private_key, executor=pool, chunk_size=50)
        values = list(range(200))
        assert eng.decrypt_batch_blocking(eng.encrypt_batch_blocking(values)) == values
        eng.close()  # leaves the caller's pool alone
        assert pool.submit(sum, [1, 2]).result() == 3


async def test_event_loop_keeps_ticking_during_a_large_batch(engine: PaillierEngine) -> None:
    """A 10 ms ticker must never be more than 50 ms late while 3000 values are encrypted."""
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
    cts = await engine.encrypt_batch(list(range(3000)))
    plain = await engine.decrypt_batch(cts[:500])
    elapsed = time.perf_counter() - start
    done.set()
    await task
    assert plain == list(range(500))
    assert elapsed > 0.2, "batch too small to show anything"
    assert len(lateness) >= 10
    assert max(lateness) < 0.050 * time_factor(), f"loop blocked for {max(lateness) * 1000:.1f} ms"


async def test_compression_on_the_pool_equals_inline(
    engine: PaillierEngine, public_key: PublicKey
) -> None:
    import numpy as np

    from p2pboost.crypto.compress import compress
    from p2pboost.crypto.packing import PackingSpec
    from p2pboost.gbdt.fixedpoint import choose_grid

    grid = choose_grid(np.array([1.0]), 100)
    spec = PackingSpec.for_grids(100, grid, grid, key_bits=public_key.bits)
    cts = engine.encrypt_batch_blocking(list(range(1, 101)))
    sums = [[c] for c in cts]
    expected = compress(public_key, spec, sums)
    assert len(expected) == -(-100 // spec.split_infos_per_plaintext)
    assert engine.compress_batch_blocking(spec, sums) == expected
    assert await engine.compress_batch(spec, sums) == expected


async def test_precomputed_factors_are_used_once(engine: PaillierEngine) -> None:
    made = await engine.precompute(300)
    assert 0 < made <= 300
    values = [7] * 400
    cts = await engine.encrypt_batch(values)
    assert len(set(cts)) == 400  # every ciphertext has its own randomiser
    assert await engine.decrypt_batch(cts) == values
    assert engine.precompute_blocking(0) == 0
    assert engine.precompute_blocking(64) == 64
    assert engine.decrypt_batch_blocking(engine.encrypt_batch_blocking([9] * 100)) == [9] * 100


def test_worker_stash_is_consumed_exactly(public_key: PublicKey, private_key: PrivateKey) -> None:
    """The worker functions, run in this process: each stashed factor serves one ciphertext."""
    from p2pboost.crypto import engine as engine_module

    material = engine_module._KeyMaterial(public_key.to_bytes(), private_key.to_bytes())
    fp = public_key.fingerprint
    state = engine_module._install(fp, material)
    state.stash.clear()
    assert engine_module._precompute_task(fp, None, 10) == 10
    stashed = list(state.stash)
    cts = engine_module._encrypt_task(fp, None, [1, 2, 3, 4])
    assert len(state.stash) == 6
    assert state.stash == stashed[:6]
    assert [private_key.decrypt(c) for c in cts] == [1, 2, 3, 4]
    cts = engine_module._encrypt_task(fp, None, list(range(20)))
    assert state.stash == []
    assert [private_key.decrypt(c) for c in cts] == list(range(20))
    engine_module._WORKER_KEYS.pop(fp)
