"""PSI's hashing and blinding keep every worker busy: tasks of at most 1/(4W) of a set (above
a floor), whatever the wire's batch, and the intersection stays exact.

The pool here records each task and runs it at once in the calling thread, so the sizes of
every task of a run can be checked; the floors are lowered so that a few thousand ids are
cut as a million would be.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import pytest

import p2pboost.protocols.psi as psi_module
from p2pboost.crypto.pieces import MIN_HASHES, MIN_POINTS, cut, task_bound
from p2pboost.crypto.psi import POINT_BYTES, PsiKey, blind_blob, hash_ids
from p2pboost.protocols.psi import _Blinding, psi_guest, psi_host
from p2pboost.testing import MemoryFabric, local_federation

WORKERS = 8


class Recorder(Executor):
    """Runs each task in the calling thread and records (function, items it worked on)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, int]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if fn is hash_ids:
            self.tasks.append(("hash", len(args[0])))
        elif fn is blind_blob:
            self.tasks.append(("blind", len(args[1]) // POINT_BYTES))
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future

    def sizes(self, kind: str) -> list[int]:
        return [n for k, n in self.tasks if k == kind]


@pytest.fixture
def eight_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs see eight workers (the default for a caller's executor: one per core)."""
    import p2pboost.workers as workers_module

    monkeypatch.setattr(workers_module, "default_workers", lambda: WORKERS)


@pytest.fixture
def low_floors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psi_module, "MIN_HASHES", 16)
    monkeypatch.setattr(psi_module, "MIN_POINTS", 16)


async def _psi(
    guest_ids: list[int], host_ids: list[int], guest_pool: Executor, host_pool: Executor
) -> tuple[Any, Any]:
    async with local_federation(MemoryFabric(), ["a", "b"]) as c:

        async def host() -> Any:
            async with c["b"].session("psi", peers=["a"]) as s:
                return await psi_host(s, "a", host_ids, executor=host_pool, batch=512)

        async def guest() -> Any:
            async with c["a"].session("psi", peers=["b"]) as s:
                return await psi_guest(s, ["b"], guest_ids, executor=guest_pool, batch=512)

        return tuple(await asyncio.gather(guest(), host()))


@pytest.mark.usefixtures("eight_workers", "low_floors")
async def test_every_task_holds_at_most_a_quarter_of_a_workers_share() -> None:
    rng = np.random.default_rng(7)
    guest_ids = rng.permutation(5000)[:3000].tolist()
    host_ids = rng.permutation(5000)[:2000].tolist()
    guest_pool, host_pool = Recorder(), Recorder()
    g, h = await _psi(guest_ids, host_ids, guest_pool, host_pool)
    common = set(guest_ids) & set(host_ids)
    assert [guest_ids[i] for i in g.positions] == [host_ids[i] for i in h.positions]
    assert {guest_ids[i] for i in g.positions} == common
    # Hashing: 4W tasks of near-equal size, not one task for the whole set.
    for pool, n in ((guest_pool, 3000), (host_pool, 2000)):
        hashes = pool.sizes("hash")
        assert sum(hashes) == n
        assert len(hashes) == 4 * WORKERS
        assert max(hashes) <= task_bound(n, WORKERS)
    # Blinding: the guest blinds its 3,000 ids and the host's 2,000; the host the reverse.
    # The wire's 512-id batches are cut to the bound of the set they belong to.
    for pool in (guest_pool, host_pool):
        blinds = pool.sizes("blind")
        assert sum(blinds) == 5000
        assert max(blinds) <= task_bound(3000, WORKERS)
        assert min(blinds) >= 16
    assert len(guest_pool.sizes("blind")) >= 4 * WORKERS * 2


@pytest.mark.usefixtures("eight_workers")
async def test_small_sets_are_not_shredded() -> None:
    """With the real floors a set of 3,000 ids is hashed in one task and blinded in pieces of
    at least the floor: a task is worth what it costs."""
    guest_pool, host_pool = Recorder(), Recorder()
    g, _ = await _psi(list(range(3000)), list(range(1000, 2500)), guest_pool, host_pool)
    assert g.size == 1500
    assert guest_pool.sizes("hash") == [3000]
    blinds = guest_pool.sizes("blind")
    assert min(blinds) >= min(MIN_POINTS, 512) // 2
    assert all(n <= 512 for n in blinds)  # never more than a wire batch


def test_a_million_ids_are_cut_by_the_bound_not_the_wire() -> None:
    """1,000,000 ids on 8 workers: 4,096-id batches stay whole (below 1/32 of the set); on 64
    workers each is cut in two; the set is hashed by 32 tasks of 31,250 ids."""
    key = PsiKey.generate()
    few = _Blinding.of(key, Recorder(), 8, 1_000_000)
    many = _Blinding.of(key, Recorder(), 64, 1_000_000)
    assert few.piece == 31_250
    assert many.piece == 3_907
    assert few.floor == MIN_POINTS
    assert few.cuts(4096) == [0, 4096]
    assert many.cuts(4096) == [0, 2048, 4096]
    cuts = cut(1_000_000, 8, minimum=MIN_HASHES, largest=task_bound(1_000_000, 8))
    assert len(cuts) - 1 == 32
    assert set(np.diff(cuts).tolist()) == {31_250}
