"""The task trace: every executor of p2pboost.workers records the tasks it runs while a trace
is on (party, worker, function, times, CPU), and nothing while it is off."""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from p2pboost.workers import (
    PARTY_ENV,
    TRACE_ENV,
    ClusterPool,
    pinned_pool,
    process_pool,
    read_trace,
    record_trace,
    trace_party,
    traced,
)


def _spin(seconds: float) -> bytes:
    """Burn CPU for ``seconds`` (so the record's CPU time has something to show)."""
    stop = time.thread_time() + seconds
    while time.thread_time() < stop:
        pass
    return b"x" * 1000


def _fail() -> None:
    raise KeyError("boom")


def _pair(a: int, b: int) -> tuple[bytes, bytes]:
    return bytes(a), bytes(b)


@pytest.fixture(autouse=True)
def _no_trace_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    monkeypatch.delenv(PARTY_ENV, raising=False)


def test_off_by_default_the_callable_goes_as_it_is() -> None:
    assert traced(_spin) is _spin
    assert traced(_spin, 3) is _spin


def test_a_process_pool_records_each_task(tmp_path: Path) -> None:
    with record_trace(tmp_path, party="guest"), process_pool(2) as pool:
        before = time.time()
        assert pool.submit(_spin, 0.05).result() == b"x" * 1000
        assert list(pool.map(_pair, [1, 2], [3, 4])) == [(bytes(1), bytes(3)), (bytes(2), bytes(4))]
        assert pool.submit(functools.partial(_pair, 5), 6).result() == (bytes(5), bytes(6))
    assert traced(_spin) is _spin  # off again after the block
    records = read_trace(tmp_path)
    assert [r.kind for r in records] == ["_spin", "_pair", "_pair", "_pair"]
    assert {r.party for r in records} == {"guest"}
    assert all(r.place is None and r.ok for r in records)
    assert [r.out_bytes for r in records] == [1000, 4, 6, 11]
    spin = records[0]
    assert before <= spin.submitted <= spin.start <= spin.end
    assert spin.cpu >= 0.05
    assert spin.wall >= 0.05
    assert int(spin.worker.split("/")[0]) != os.getpid()  # measured in the worker


def test_a_pinned_pool_records_the_place_and_each_party_its_own(tmp_path: Path) -> None:
    with record_trace(tmp_path), pinned_pool(2) as pool:
        with trace_party("host1"):
            pool.submit_to(1, _pair, 1, 1).result()
        with trace_party("host2"):
            pool.submit_to(0, _pair, 2, 2).result()
            pool.submit(_pair, 3, 3).result()  # any worker could run it: no place
    records = read_trace(tmp_path)
    assert [(r.party, r.place, r.out_bytes) for r in records] == [
        ("host1", 1, 2),
        ("host2", 0, 4),
        ("host2", None, 6),
    ]
    assert records[0].worker != records[1].worker  # two places, two processes


def test_a_failed_task_is_recorded_and_still_raises(tmp_path: Path) -> None:
    with record_trace(tmp_path, party="guest"), process_pool(1) as pool:
        with pytest.raises(KeyError):
            pool.submit(_fail).result()
    (record,) = read_trace(tmp_path)
    assert record.kind == "_fail"
    assert not record.ok


def test_the_environment_turns_it_on_and_names_the_party(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACE_ENV, str(tmp_path))
    monkeypatch.setenv(PARTY_ENV, "host7")
    with process_pool(1) as pool:
        pool.submit(_pair, 1, 2).result()
    (record,) = read_trace(tmp_path)
    assert (record.party, record.kind) == ("host7", "_pair")


def test_a_broken_line_is_skipped(tmp_path: Path) -> None:
    good = ["guest", "1/1", "k", None, 1.0, 2.0, 3.0, 0.5, 10, True]
    (tmp_path / "tasks-1.jsonl").write_text(json.dumps(good) + '\n["guest", "1/1", "k", nu')
    (record,) = read_trace(tmp_path)
    assert (record.start, record.end, record.cpu, record.out_bytes) == (2.0, 3.0, 0.5, 10)


class _Client:
    """The little of a ``distributed.Client`` that :class:`ClusterPool` uses to send tasks;
    what it is sent is kept, and run here by the test."""

    asynchronous = False
    status = "running"
    scheduler = SimpleNamespace(address="tls://scheduler:8786")
    loop = SimpleNamespace(add_callback=lambda fn: None)

    def __init__(self) -> None:
        self.sent: list[tuple[Any, Any, tuple[Any, ...], dict[str, Any]]] = []

    def nthreads(self) -> dict[str, int]:
        return {"tls://worker:1": 1, "tls://worker:2": 1}

    def subscribe_topic(self, topic: str, handler: Any) -> None:
        return None

    def unsubscribe_topic(self, topic: str) -> None:
        return None

    def cancel(self, futures: Any) -> None:
        return None

    def submit(self, runner: Any, fn: Any, args: Any, kwargs: Any, **_: Any) -> Any:
        self.sent.append((runner, fn, args, kwargs))
        return object()


def test_a_cluster_sends_its_tasks_traced(tmp_path: Path) -> None:
    client = _Client()
    pool = ClusterPool(client)  # type: ignore[arg-type]
    try:
        with record_trace(tmp_path, party="host1"):
            pool.submit(_pair, 1, 2)
            pool.submit_to(1, _pair, 3, 4)
        pool.submit(_pair, 5, 6)  # after the block: not traced
    finally:
        pool.shutdown(wait=False)
    for runner, fn, args, kwargs in client.sent:  # as the Dask workers would
        runner(fn, args, kwargs)
    records = read_trace(tmp_path)
    assert [(r.party, r.place, r.out_bytes) for r in records] == [
        ("host1", None, 3),
        ("host1", 1, 7),
    ]
