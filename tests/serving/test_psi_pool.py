"""Serving PSIs (``align="psi"``) start no process per batch: small sets are blinded in a
thread, larger ones share one pool per serving party, started once (psi_pool.py says why:
a pool per PSI cost most of ``host_timeout`` under load)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from p2pboost import workers
from p2pboost.hetero.inference import psi_pool
from p2pboost.testing import Fabric, local_federation
from tests.serving.conftest import Trained
from tests.serving.test_serving import CONFIG, serving


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int | None]]:
    """Every process pool started (the protocols' own and the serving pool's), as threads so
    that the test stays fast; the list of their sizes."""
    calls: list[int | None] = []
    made: list[Executor] = []

    def counting(n: int | None = None, **_: Any) -> Executor:
        calls.append(n)
        made.append(ThreadPoolExecutor(2))
        return made[-1]

    monkeypatch.setattr(workers, "process_pool", counting)
    yield calls
    for pool in made:
        pool.shutdown(wait=False)


async def _two_psis(fabric: Fabric, trained: Trained) -> Any:
    rows = np.arange(30)
    async with (
        local_federation(fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, output="margin", host_timeout=30.0) as p,
    ):
        for part in (rows[:15], rows[15:]):
            out = await p.predict_batch(trained.ids[part], trained.guest_X(part), align="psi")
            assert np.array_equal(out, trained.reference_margin(part))
        return p


async def test_small_sets_start_no_process_pool(
    memory_fabric: Fabric, trained: Trained, started: list[int | None]
) -> None:
    await _two_psis(memory_fabric, trained)
    assert started == []  # the guest's 15 ids and each host's 569: a thread each


async def test_large_sets_share_one_pool_per_party(
    memory_fabric: Fabric,
    trained: Trained,
    started: list[int | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(psi_pool, "INLINE_IDS", 0)  # every set is "large"
    predictor = await _two_psis(memory_fabric, trained)
    assert predictor._psi_pool.started == 1  # two PSIs with each of two hosts: one guest pool
    assert len(started) == 3  # and one on each host, for both of its PSIs


async def test_a_given_executor_is_used_as_it_is(started: list[int | None]) -> None:
    with ThreadPoolExecutor(1) as mine:
        pool = psi_pool.PsiPool(mine)
        assert await pool.ready(10**6) is mine
        await pool.close()
        assert mine.submit(int, "7").result() == 7  # not shut down by the PsiPool
    assert started == []
