"""Crypto workers yield the CPU to the event loop: they run at a lower priority."""

from __future__ import annotations

import os

from p2pboost.workers import WORKER_NICENESS, default_workers, process_pool


def _niceness() -> int:
    return os.nice(0)


def _add(a: int, b: int) -> int:
    return a + b


def test_workers_run_at_lower_priority() -> None:
    parent = os.nice(0)
    with process_pool(1) as pool:
        child = pool.submit(_niceness).result()
    assert child == min(19, parent + WORKER_NICENESS)


def test_initializer_still_runs_and_pool_works() -> None:
    with process_pool(2, initializer=os.nice, initargs=(0,)) as pool:
        assert list(pool.map(_add, [1, 2], [3, 4])) == [4, 6]
    assert default_workers() >= 1
