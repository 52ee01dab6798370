"""A cluster place's state log keeps its calls in the order they ran, whatever the order their
results arrive in (each is fetched from its worker on its own), and a lost worker's tasks are
run again in that order. Driven through a stand-in for Dask's client, so the order of arrival
is the test's to choose."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from p2pboost.workers import ClusterPool, Log, stateful


@stateful(Log.START)
def _open(name: str) -> None:
    return None


@stateful(Log.APPEND)
def _push(name: str, value: int) -> int:
    return value


class _Client:
    """What :class:`ClusterPool` asks of a ``distributed.Client``; submissions are recorded,
    and nothing runs until the test ends an attempt."""

    asynchronous = False
    status = "running"
    scheduler = SimpleNamespace(address="tls://scheduler:8786")
    loop = SimpleNamespace(add_callback=lambda fn: None)

    def __init__(self) -> None:
        self.sent: list[tuple[Any, tuple[Any, ...]]] = []

    def nthreads(self) -> dict[str, int]:
        return {"tls://worker:1": 1}

    def subscribe_topic(self, topic: str, handler: Any) -> None:
        return None

    def unsubscribe_topic(self, topic: str) -> None:
        return None

    def cancel(self, futures: Any) -> None:
        return None

    def submit(self, runner: Any, fn: Any, args: tuple[Any, ...], kwargs: Any, **_: Any) -> Any:
        self.sent.append((fn, args))
        return object()  # the attempt's handle


def _end(pool: ClusterPool, job: Any, ok: bool = True, value: Any = None) -> None:
    pool._ended(pool._places[0], job, job.remote, ok, value)


def test_calls_are_logged_in_the_order_they_ran_not_the_order_results_arrive() -> None:
    client = _Client()
    pool = ClusterPool(client)  # type: ignore[arg-type]
    try:
        pool.submit_to(0, _open, "s")
        futures = [pool.submit_to(0, _push, "s", v) for v in range(3)]
        place = pool._places[0]
        jobs = list(place.jobs)
        _end(pool, jobs[0])
        _end(pool, jobs[3], value=2)  # the last result arrives first
        assert futures[2].result(timeout=0) == 2  # its caller need not wait
        assert [j.args for j in place.logs["s"]] == [("s",)]  # but the log does
        _end(pool, jobs[2], value=1)
        _end(pool, jobs[1], value=0)
        assert [j.args for j in place.logs["s"]] == [("s",), ("s", 0), ("s", 1), ("s", 2)]
        assert not place.jobs
    finally:
        pool.shutdown()


def test_a_lost_worker_reruns_the_tasks_in_the_order_they_ran() -> None:
    """Task 2 ended (its caller has the result), task 1 had not reported when the worker was
    lost: the new worker gets the log, then 1, then 2, and 2 is logged after 1."""
    client = _Client()
    pool = ClusterPool(client)  # type: ignore[arg-type]
    try:
        pool.submit_to(0, _open, "s")
        futures = [pool.submit_to(0, _push, "s", v) for v in (1, 2)]
        place = pool._places[0]
        opened, first, second = list(place.jobs)
        _end(pool, opened)
        _end(pool, second, value=2)
        assert futures[1].result(timeout=0) == 2
        client.sent.clear()
        pool._move(place)  # as when the scheduler reports the worker gone
        assert [args for _, args in client.sent] == [("s",), ("s", 1), ("s", 2)]
        redo, first, second = list(place.jobs)
        _end(pool, redo)
        _end(pool, second, value=2)  # again out of order
        _end(pool, first, value=1)
        assert futures[0].result(timeout=0) == 1
        assert [j.args for j in place.logs["s"]] == [("s",), ("s", 1), ("s", 2)]
    finally:
        pool.shutdown()
