"""The private key goes only to the tasks that use it, whatever executor runs the engine.

A recording executor pickles every task it is given (what would cross to another process or
machine) and the test looks for the key's prime factors in those bytes: only decryption and
opening (and, on an executor of this machine's own processes, one registration per worker)
may carry them; encryption, randomisers and compression carry the public key only, and every
result is what the key owner's own computation gives.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

import numpy as np
import pytest

from p2pboost.crypto import _workers
from p2pboost.crypto.compress import compress_parts as inline_compress
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.packing import PackingSpec
from p2pboost.crypto.paillier import PrivateKey, PublicKey
from p2pboost.gbdt.fixedpoint import choose_grid

#: Tasks that need the private key to do their work at all.
KEY_TASKS = {"decrypt_task", "open_task"}


def _record(tasks: list[tuple[str, bytes]], fn: Callable[..., Any], args: Any, kw: Any) -> None:
    base = fn
    while isinstance(base, functools.partial):  # map's wrapping of a partial of a task
        base = base.args[0] if base.func.__name__ == "_process_chunk" else base.func
    tasks.append((base.__name__, pickle.dumps((fn, args, kw))))


class Recorder(Executor):
    """Passes tasks to ``inner`` and keeps, per task, its function's name and its pickle."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.tasks: list[tuple[str, bytes]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        _record(self.tasks, fn, args, kwargs)
        return self.inner.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)


class RecordingPool(ProcessPoolExecutor):
    """A plain process pool that keeps every task's pickle (as :class:`Recorder`)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, mp_context=multiprocessing.get_context("spawn"))
        self.tasks: list[tuple[str, bytes]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        _record(self.tasks, fn, args, kwargs)
        return super().submit(fn, *args, **kwargs)


def _encodings(value: int) -> list[bytes]:
    size = (value.bit_length() + 7) // 8
    return [int(value).to_bytes(size, "big"), int(value).to_bytes(size, "little")]


def _carries_key(blob: bytes, private_key: PrivateKey) -> bool:
    return any(e in blob for v in (private_key.p, private_key.q) for e in _encodings(int(v)))


async def _exercise(eng: CryptoEngine, public_key: PublicKey, private_key: PrivateKey) -> None:
    """Every kind of task the engine sends, each result checked against the inline one."""
    values = list(range(300))
    assert eng.precompute_blocking(100) == 100
    cts = eng.encrypt_batch_blocking(values)
    assert eng.decrypt_batch_blocking(cts) == values
    assert await eng.precompute(100) == 100
    cts = await eng.encrypt_batch(values)
    assert await eng.decrypt_batch(cts) == values
    rng = np.random.default_rng(11)
    n = 200
    g, h = rng.integers(-(2**20), 2**20, n), rng.integers(0, 2**20, n)
    grid = choose_grid(np.array([2.0**20]), n)
    spec = PackingSpec.for_grids(n, grid, grid, key_bits=public_key.bits)
    data = await eng.encrypt_packed(spec, g, h)
    parts = [data[: len(data) // 2], data[len(data) // 2 :]]
    compressed = await eng.compress_parts(spec, parts)
    assert compressed == inline_compress(public_key, spec, parts)
    counts = np.full(n // 2, 2, dtype=np.int64)
    G, H = await eng.open_split_infos(spec, compressed, counts)
    np.testing.assert_array_equal(G[:, 0], g[: n // 2] + g[n // 2 :])
    np.testing.assert_array_equal(H[:, 0], h[: n // 2] + h[n // 2 :])


def _check(recorder: Recorder | RecordingPool, private_key: PrivateKey, registrations: int) -> None:
    carrying = [name for name, blob in recorder.tasks if _carries_key(blob, private_key)]
    assert set(carrying) & KEY_TASKS, "the search must find the key where it is sent"
    others = [name for name in carrying if name not in KEY_TASKS]
    assert others.count("prepare_task") == len(others), f"key sent with {sorted(set(others))}"
    assert len(others) == registrations
    names = {name for name, _ in recorder.tasks}
    assert {"encrypt_task", "encrypt_packed_task", "factors_task", "compress_task"} <= names


async def test_process_pool_tasks_carry_the_key_only_where_used(
    public_key: PublicKey, private_key: PrivateKey
) -> None:
    pool = RecordingPool(2)
    try:
        eng = CryptoEngine(public_key, private_key, executor=pool, workers=2)
        await _exercise(eng, public_key, private_key)
        assert await eng.prepare() >= 1
    finally:
        pool.shutdown()
    # this machine's own processes: the key is registered once per worker (two tasks), for
    # the owner's faster encryption, and travels with no other task
    _check(pool, private_key, registrations=2)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A one-worker in-process Dask cluster (fast to start; the recorder pickles each task
    as a cluster of other machines would)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield client


async def test_dask_executor_tasks_carry_the_key_only_where_used(
    public_key: PublicKey, private_key: PrivateKey, dask_client: Any
) -> None:
    recorder = Recorder(dask_client.get_executor())
    _workers.WORKER_KEYS.pop(public_key.fingerprint, None)  # in-process worker: start bare
    eng = CryptoEngine(public_key, private_key, executor=recorder, workers=2)
    await _exercise(eng, public_key, private_key)
    await eng.prepare()
    _check(recorder, private_key, registrations=0)  # machines unknown: no registration
