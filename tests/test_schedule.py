"""The list-scheduling replay of a task trace (benchmarks/_schedule.py) on small graphs whose
makespan is worked out by hand in each test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks._schedule import (
    CriticalPath,
    Task,
    critical_path,
    replay,
    scaling,
    tasks_from_trace,
)
from p2pboost.workers import TaskRecord


def _t(
    submitted: float,
    end: float,
    duration: float,
    *,
    party: str = "guest",
    kind: str = "work",
    place: int | None = None,
    out_bytes: int = 0,
    background: bool = False,
) -> Task:
    return Task(party, kind, submitted, end, duration, place, out_bytes, background)


def test_independent_tasks_spread_over_the_workers() -> None:
    tasks = [_t(0.0, 4.0, 1.0) for _ in range(8)]  # all submitted at once, 1 s each
    assert replay(tasks, 1, start=0.0) == pytest.approx(8.0)
    assert replay(tasks, 2, start=0.0) == pytest.approx(4.0)
    assert replay(tasks, 8, start=0.0) == pytest.approx(1.0)
    assert replay(tasks, 64, start=0.0) == pytest.approx(1.0)
    out = scaling(tasks, start=0.0, stop=4.0, widths=(8, 16))
    path = {"tasks": 1.0, "waits": 0.0, "own": 0.0, "network": 0.0}
    assert out["8"] == {"s_per_tree": 1.0, "efficiency": 1.0, "path": path}
    assert out["16"] == {"s_per_tree": 1.0, "efficiency": 0.5, "path": path}  # 8 for 16


def test_one_huge_task_bounds_the_makespan() -> None:
    # One 8 s task and eight 1 s tasks: 16 s of work. Graham's rule in submission order.
    tasks = [_t(0.0, 1.0, 8.0)] + [_t(0.0, 1.0, 1.0) for _ in range(8)]
    assert replay(tasks, 1, start=0.0) == pytest.approx(16.0)
    assert replay(tasks, 2, start=0.0) == pytest.approx(8.0)  # the big one | eight small ones
    assert replay(tasks, 8, start=0.0) == pytest.approx(8.0)
    out = scaling(tasks, start=0.0, stop=1.0, widths=(2, 8, 64))
    assert out["2"]["efficiency"] == pytest.approx(1.0)
    assert out["8"]["efficiency"] == pytest.approx(16 / (8 * 8), abs=1e-4)
    assert out["64"]["efficiency"] == pytest.approx(16 / (64 * 8), abs=1e-4)


def test_submission_order_decides_who_goes_first() -> None:
    # 1, 1, 2 seconds submitted in that order on two workers: the 2 s task waits for a worker
    # until 1 s, so 3 s; submitted longest first, 2 s (the replay follows the run's order).
    tasks = [_t(0.001 * i, 9.0, d) for i, d in enumerate([1.0, 1.0, 2.0])]
    assert replay(tasks, 2, start=0.0) == pytest.approx(3.0)
    reordered = [_t(0.001 * i, 9.0, d) for i, d in enumerate([2.0, 1.0, 1.0])]
    assert replay(reordered, 2, start=0.0) == pytest.approx(2.001)


def test_a_task_submitted_after_another_ended_waits_for_it_with_the_lag() -> None:
    # a (1 s) ends at 1.0; b is submitted 0.25 s later (the party's own work) and takes 2 s.
    tasks = [_t(0.0, 1.0, 1.0, kind="a"), _t(1.25, 3.25, 2.0, kind="b")]
    for workers in (1, 8):
        assert replay(tasks, workers, start=0.0) == pytest.approx(3.25)
    out = scaling(tasks, start=0.0, stop=3.5, widths=(8,))  # 0.25 s after the last task
    assert out["8"]["s_per_tree"] == pytest.approx(3.5)
    assert out["8"]["efficiency"] == pytest.approx(1 / 8)


def test_a_throttled_stream_of_one_kind_is_not_a_chain() -> None:
    # At two workers the code keeps two chunks in flight: chunk 3 is submitted when chunk 1
    # ends, chunk 4 when chunk 2 ends (the run: 0-1, 0-1, 1-2, 1-2). Same party and kind:
    # they do not depend on one another, so 4 workers run them at once.
    tasks = [
        _t(0.0, 1.0, 1.0, kind="encrypt"),
        _t(0.0, 1.0, 1.0, kind="encrypt"),
        _t(1.0, 2.0, 1.0, kind="encrypt"),
        _t(1.0, 2.0, 1.0, kind="encrypt"),
    ]
    assert replay(tasks, 2, start=0.0) == pytest.approx(2.0)
    assert replay(tasks, 4, start=0.0) == pytest.approx(1.0)
    # Another kind submitted after an end does wait: the same trace with "decrypt" second.
    chained = [*tasks[:2], *(_t(t.submitted, t.end, 1.0, kind="decrypt") for t in tasks[2:])]
    assert replay(chained, 4, start=0.0) == pytest.approx(2.0)


def test_the_other_party_waits_for_the_message_at_the_stated_bandwidth() -> None:
    # The guest makes 1 MB in 1 s; the host starts on it as soon as it arrives.
    tasks = [
        _t(0.0, 1.0, 1.0, kind="encrypt", out_bytes=1_000_000),
        _t(1.0, 2.0, 1.0, party="host", kind="histogram"),
    ]
    assert replay(tasks, 4, start=0.0) == pytest.approx(2.0)
    assert replay(tasks, 4, start=0.0, bandwidth=1e6) == pytest.approx(3.0)  # + 1 s on the wire
    # Two chunks made at once share the link one after the other. Each host task reacted to
    # its own chunk 0.05 s after it arrived in the run: the second chunk is on the wire from
    # 2 to 3 s, so its task runs from 3.05 to 4.05.
    two = [
        _t(0.0, 1.0, 1.0, kind="encrypt", out_bytes=1_000_000),
        _t(0.0, 1.1, 1.0, kind="encrypt", out_bytes=1_000_000),
        _t(1.05, 2.05, 1.0, party="host", kind="histogram"),
        _t(1.15, 3.15, 1.0, party="host", kind="histogram"),
    ]
    assert replay(two, 4, start=0.0) == pytest.approx(1.0 + 0.05 + 1.0)
    assert replay(two, 4, start=0.0, bandwidth=1e6) == pytest.approx(4.05)


def test_each_party_has_its_own_workers() -> None:
    tasks = [_t(0.0, 1.0, 1.0, party=p) for p in ("guest", "host") for _ in range(4)]
    assert replay(tasks, 4, start=0.0) == pytest.approx(1.0)
    assert replay(tasks, 2, start=0.0) == pytest.approx(2.0)


def test_a_place_keeps_its_tasks_on_one_worker_in_order() -> None:
    # Four 1 s tasks, all to place 0 of a pinned pool: one worker runs them, whatever W.
    tasks = [_t(0.0, 1.0, 1.0, place=0) for _ in range(4)]
    assert replay(tasks, 8, start=0.0) == pytest.approx(4.0)
    # Places 0 and 1 with two tasks each: at W=1 both places share the one worker.
    spread = [_t(0.0, 1.0, 1.0, place=i % 2) for i in range(4)]
    assert replay(spread, 8, start=0.0) == pytest.approx(2.0)
    assert replay(spread, 1, start=0.0) == pytest.approx(4.0)


def test_a_task_of_no_place_leaves_the_worker_a_place_needs() -> None:
    # Ready together: first a task any worker can run, then one of place 0. On two workers
    # they run side by side (the free task goes to worker 1), not one after the other.
    tasks = [_t(0.0, 1.0, 1.0), _t(0.0, 2.0, 1.0, place=0)]
    assert replay(tasks, 2, start=0.0) == pytest.approx(1.0)


def test_background_tasks_fill_idle_workers_and_nobody_waits_for_them() -> None:
    # A 5 s background task ends before the real one is submitted: no dependency, and it does
    # not count in the run's length, but it does hold its worker while it runs.
    tasks = [
        _t(0.0, 0.5, 5.0, kind="factors_task", background=True),
        _t(0.6, 1.6, 1.0, kind="encrypt"),
    ]
    assert replay(tasks, 2, start=0.0) == pytest.approx(1.6)
    assert replay(tasks, 1, start=0.0) == pytest.approx(6.0)  # behind it on the one worker


def test_encryptions_wait_for_the_randomisers_they_took() -> None:
    # In the run, the guest's background task (1 s of randomisers) ran beside a 1 s task of
    # its own, and the next encryption, submitted when both had ended, took its randomisers.
    tasks = [
        _t(0.0, 1.0, 1.0, kind="open_task"),
        _t(0.0, 1.0, 1.0, kind="factors_task", background=True),
        _t(1.0, 1.5, 0.5, kind="encrypt_packed_task"),
    ]
    # Two workers: as it ran. One worker: the background task gets the worker only after the
    # other task, and the encryption waits for it (without the randomisers it would have
    # taken their time itself: they are never free).
    assert replay(tasks, 2, start=0.0) == pytest.approx(1.5)
    assert replay(tasks, 1, start=0.0) == pytest.approx(2.5)
    # Nobody else waits for it: not the guest's other kinds, not another party's tasks.
    assert replay([*tasks[:2], _t(1.0, 1.5, 0.5, kind="compress_task")], 1, start=0.0) == (
        pytest.approx(1.5)
    )
    host = _t(1.0, 1.5, 0.5, party="host", kind="encrypt_packed_task")
    assert replay([*tasks[:2], host], 1, start=0.0) == pytest.approx(1.5)


def test_the_run_s_own_time_before_and_after_its_tasks_is_kept() -> None:
    tasks = [_t(2.0, 3.0, 1.0)]  # 2 s of the party's own work first, 1 s after (stop=4)
    assert replay(tasks, 8, start=0.0, stop=4.0) == pytest.approx(4.0)
    assert replay([], 8, start=0.0, stop=4.0) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="at least 1"):
        replay(tasks, 0, start=0.0)


def test_records_become_tasks_that_take_their_cpu_time() -> None:
    records = [
        TaskRecord("guest", "1/1", "encrypt_task", None, 0.0, 0.5, 2.5, 1.5, 100, True),
        TaskRecord("guest", "1/1", "factors_task", 3, 0.0, 2.5, 3.0, 0.4, 0, True),
    ]
    work, filler = tasks_from_trace(records)
    assert (work.duration, work.out_bytes, work.background) == (1.5, 100, False)
    assert (filler.duration, filler.place, filler.background) == (0.4, 3, True)


def test_the_critical_path_splits_the_time_into_tasks_waits_own_time_and_network() -> None:
    # Eight 1 s tasks on one worker: the last waited 7 s for the worker.
    eight = [_t(0.0, 4.0, 1.0) for _ in range(8)]
    assert critical_path(eight, 1, start=0.0) == CriticalPath(1.0, 7.0, 0.0, 0.0)
    assert critical_path(eight, 8, start=0.0) == CriticalPath(1.0, 0.0, 0.0, 0.0)
    # a, then 0.25 s of the party's own work, then b; 0.25 s more after it (stop).
    lagged = [_t(0.0, 1.0, 1.0, kind="a"), _t(1.25, 3.25, 2.0, kind="b")]
    path = critical_path(lagged, 8, start=0.0, stop=3.5)
    assert (path.tasks, path.waits, path.own, path.network) == pytest.approx((3.0, 0, 0.5, 0))
    # The guest's 1 MB crosses a 1 MB/s network before the host's task.
    sent = [
        _t(0.0, 1.0, 1.0, kind="encrypt", out_bytes=1_000_000),
        _t(1.0, 2.0, 1.0, party="host", kind="histogram"),
    ]
    path = critical_path(sent, 4, start=0.0, bandwidth=1e6)
    assert (path.tasks, path.waits, path.own, path.network) == pytest.approx((2.0, 0, 0, 1.0))
    # A place's four tasks one after the other: the path runs through all four.
    placed = [_t(0.0, 1.0, 1.0, place=0) for _ in range(4)]
    assert critical_path(placed, 8, start=0.0).tasks == pytest.approx(4.0)
    # The party's own time before its first task.
    late = critical_path([_t(2.0, 3.0, 1.0)], 8, start=0.0, stop=4.0)
    assert (late.tasks, late.own) == pytest.approx((1.0, 3.0))


@st.composite
def _runs(draw: st.DrawFn) -> list[Task]:
    tasks = []
    for _ in range(draw(st.integers(1, 14))):
        submitted = draw(st.floats(0.0, 5.0))
        ran = draw(st.floats(0.01, 2.0))
        tasks.append(
            _t(
                submitted,
                submitted + ran,
                draw(st.floats(0.0, 2.0)),
                party=draw(st.sampled_from(["guest", "host"])),
                kind=draw(st.sampled_from(["a", "b", "factors_task", "encrypt_task"])),
                place=draw(st.none() | st.integers(0, 3)),
                out_bytes=draw(st.integers(0, 2_000_000)),
            )
        )
    return [
        Task(
            t.party,
            t.kind,
            t.submitted,
            t.end,
            t.duration,
            t.place,
            t.out_bytes,
            t.kind == "factors_task",
        )
        for t in tasks
    ]


@settings(max_examples=150, deadline=None)
@given(tasks=_runs(), workers=st.integers(1, 5), bandwidth=st.none() | st.just(1e6))
def test_the_parts_of_the_critical_path_add_up_to_the_replay(
    tasks: list[Task], workers: int, bandwidth: float | None
) -> None:
    # The replay's length comes from its tasks' finishing times; the path is walked back
    # separately: they must agree, whatever the graph.
    stop = max(t.end for t in tasks) + 0.5
    length = replay(tasks, workers, start=0.0, stop=stop, bandwidth=bandwidth)
    path = critical_path(tasks, workers, start=0.0, stop=stop, bandwidth=bandwidth)
    assert min(path.tasks, path.waits, path.own, path.network) >= -1e-9
    assert path.total == pytest.approx(length, abs=1e-9)
