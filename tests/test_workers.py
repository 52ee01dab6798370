"""Crypto workers yield the CPU to the event loop: they run at a lower priority."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from p2pboost.workers import (
    WORKER_NICENESS,
    PinnedPool,
    default_workers,
    idle_threads,
    idle_threads_supported,
    owned_executor,
    pinned_pool,
    process_pool,
    spare_cpus,
)

_KEPT: list[int] = []


def _niceness() -> int:
    return os.nice(0)


def _add(a: int, b: int) -> int:
    return a + b


_MARK = threading.local()


def _mark(value: str) -> None:
    _MARK.value = value


def _policy_and_mark() -> tuple[int, str]:
    return os.sched_getscheduler(0), getattr(_MARK, "value", "")


def test_workers_run_at_lower_priority() -> None:
    parent = os.nice(0)
    with process_pool(1) as pool:
        child = pool.submit(_niceness).result()
    assert child == min(19, parent + WORKER_NICENESS)


def test_initializer_still_runs_and_pool_works() -> None:
    with process_pool(2, initializer=os.nice, initargs=(0,)) as pool:
        assert list(pool.map(_add, [1, 2], [3, 4])) == [4, 6]
    assert default_workers() >= 1


def _keep(value: int) -> list[int]:
    """Worker-side state: what this process was given so far."""
    _KEPT.append(value)
    return list(_KEPT)


def test_pinned_workers_keep_state_in_order() -> None:
    with pinned_pool(2) as pool:
        pool.start()
        assert pool.workers == 2
        futures = [pool.submit_to(i % 2, _keep, i) for i in range(6)]
        assert futures[-2].result() == [0, 2, 4]
        assert futures[-1].result() == [1, 3, 5]
        assert pool.submit_to(0, _niceness).result() == min(19, os.nice(0) + WORKER_NICENESS)
        # An ordinary executor too: map, submit.
        assert list(pool.map(_add, [1, 2, 3], [3, 4, 5])) == [4, 6, 8]


def test_a_pinned_pool_can_carry_more_places_than_processes() -> None:
    with pinned_pool(4, processes=2) as pool:
        assert pool.workers == 4
        pids = [pool.submit_to(i, os.getpid).result() for i in range(4)]
        assert pids[0] == pids[2] != pids[1] == pids[3]  # place i in process i mod 2
        futures = [pool.submit_to(i % 4, _keep, i) for i in range(8)]
        # One process carries places 0 and 2: it got 0, 2, 4, 6 in the order sent.
        assert futures[6].result()[-4:] == [0, 2, 4, 6]
        with pytest.raises(IndexError):
            pool.submit_to(4, os.getpid)


async def test_owned_executor_gives_a_pinned_pool_when_asked() -> None:
    with pinned_pool(1) as mine:
        async with owned_executor(mine, 4, pinned=True) as (pool, n):
            assert pool is mine
            assert n == 1
    with process_pool(1) as plain:
        async with owned_executor(plain, 1, pinned=True) as (pool, n):
            assert isinstance(pool, PinnedPool)
            assert pool is not plain
            assert n == 1
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(pool, _add, 2, 3) == 5
        assert plain.submit(_add, 1, 1).result() == 2  # the caller's pool is left running
        async with owned_executor(plain, 3) as (pool, n):
            assert pool is plain
            assert n == 3


@pytest.mark.skipif(not idle_threads_supported(), reason="no idle scheduling class (not Linux)")
def test_idle_threads_run_in_the_idle_class_and_leave_others_alone() -> None:
    pool = idle_threads(2, initializer=_mark, initargs=("set",))
    try:
        got = {pool.submit(_policy_and_mark).result() for _ in range(4)}
    finally:
        pool.shutdown(wait=True)
    assert got == {(os.SCHED_IDLE, "set")}
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the caller's thread keeps its class


def test_idle_threads_are_not_offered_where_the_system_refuses_the_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object) -> None:
        raise PermissionError("not in this sandbox")

    monkeypatch.setattr(os, "sched_setscheduler", refuse, raising=False)
    monkeypatch.setattr(os, "SCHED_IDLE", 5, raising=False)
    assert idle_threads_supported.__wrapped__() is False  # asked afresh, not the cached answer
    monkeypatch.delattr(os, "SCHED_IDLE")
    assert idle_threads_supported.__wrapped__() is False


def test_spare_cpus_is_a_count_where_the_kernel_says() -> None:
    spare = spare_cpus()
    if os.path.exists("/proc/loadavg"):
        assert spare is not None
        assert 0 <= spare <= default_workers()
    else:
        assert spare is None


def test_pools_can_be_threads_of_the_party_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """P2PBOOST_POOL=threads: local pools (plain and pinned) are threads of this process, the
    engine encrypts and decrypts on them, and places keep their order."""
    from concurrent.futures import ThreadPoolExecutor

    from p2pboost.crypto.engine import CryptoEngine
    from p2pboost.crypto.keys import make_keypair
    from p2pboost.workers import POOL_ENV, pool_kind

    monkeypatch.setenv(POOL_ENV, "threads")
    assert pool_kind() == "threads"
    with process_pool(2) as pool:
        assert isinstance(pool, ThreadPoolExecutor)
        assert pool.submit(os.getpid).result() == os.getpid()
    pinned = PinnedPool(2)
    try:
        order: list[int] = []
        futures = [pinned.submit_to(i % 2, order.append, i) for i in range(6)]
        for f in futures:
            f.result()
        assert [i for i in order if i % 2 == 0] == [0, 2, 4]
    finally:
        pinned.shutdown()
    pk, sk = make_keypair("ou", 1024, allow_insecure=True)
    values = list(range(100, 300))
    with CryptoEngine(pk, sk, workers=2) as engine:
        assert engine.decrypt_batch_blocking(engine.encrypt_batch_blocking(values)) == values
    monkeypatch.setenv(POOL_ENV, "fibers")
    with pytest.raises(ValueError, match="auto, processes or threads"):
        pool_kind()


def test_pools_are_threads_by_default_only_where_the_gil_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset (or ``auto``), P2PBOOST_POOL gives threads to callers whose tasks release the GIL
    and processes to every other; ``processes`` and ``threads`` override both."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    from p2pboost.workers import POOL_ENV, pool_kind

    monkeypatch.delenv(POOL_ENV, raising=False)
    assert (pool_kind(), pool_kind(prefer_threads=True)) == ("processes", "threads")
    with process_pool(1, prefer_threads=True) as pool:
        assert isinstance(pool, ThreadPoolExecutor)
    with process_pool(1) as pool:
        assert isinstance(pool, ProcessPoolExecutor)
    pinned = PinnedPool(2, prefer_threads=True)
    try:
        assert pinned.submit_to(1, os.getpid).result() == os.getpid()
    finally:
        pinned.shutdown()
    monkeypatch.setenv(POOL_ENV, "auto")
    assert pool_kind(prefer_threads=True) == "threads"
    monkeypatch.setenv(POOL_ENV, "processes")
    assert pool_kind(prefer_threads=True) == "processes"
    monkeypatch.setenv(POOL_ENV, "threads")
    assert pool_kind() == "threads"


def test_owned_executor_starts_threads_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A protocol that owns its pool (no executor given) gets threads where its tasks release
    the GIL (vertical training under the native kernel asks so) and processes otherwise, pinned
    or not."""
    import asyncio
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    from p2pboost.workers import POOL_ENV, owned_executor

    monkeypatch.delenv(POOL_ENV, raising=False)

    async def kinds() -> list[object]:
        seen: list[object] = []
        for prefer in (True, False):
            async with owned_executor(None, 1, prefer_threads=prefer) as (pool, _):
                seen.append(set(type(pool).__mro__))
            async with owned_executor(None, 1, pinned=True, prefer_threads=prefer) as (pool, _):
                assert isinstance(pool, PinnedPool)
                seen.append(pool.submit_to(0, os.getpid).result() == os.getpid())
        return seen

    threads, same_process, processes, other_process = asyncio.run(kinds())
    assert isinstance(threads, set)
    assert ThreadPoolExecutor in threads
    assert isinstance(processes, set)
    assert ProcessPoolExecutor in processes
    assert same_process is True
    assert other_process is False
