"""stderr styles: JSON records for services, text with bars for people, quiet."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from p2pboost.app._console import BarReporter, Console, JsonFormatter, TextFormatter, unconfigure
from p2pboost.app._progress import Meter, Tick, TreeClock
from p2pboost.app.party import _tree_callback
from p2pboost.gbdt.callbacks import CallbackEnv


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("p2pboost.guest", logging.INFO, "x.py", 1, "tree %d", (3,), None)
    record.__dict__.update(extra)
    return record


def test_json_formatter_one_object_per_record_with_extras() -> None:
    out = json.loads(JsonFormatter().format(_record(peer="host")))
    assert out["message"] == "tree 3"
    assert (out["level"], out["logger"], out["peer"]) == ("info", "p2pboost.guest", "host")
    assert out["time"].endswith("+00:00")


def test_json_formatter_keeps_the_exception_on_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record()
        record.exc_info = sys.exc_info()
    text = JsonFormatter().format(record)
    assert "\n" not in text
    assert "ValueError: boom" in json.loads(text)["exception"]


def test_text_formatter_shows_the_short_logger_name() -> None:
    assert TextFormatter().format(_record()).endswith(" guest: tree 3")


def test_bar_reporter_off_a_terminal_prints_each_label() -> None:
    file = io.StringIO()
    bar = BarReporter(logging.getLogger("p2pboost.test"), file)
    bar.begin("training 2 trees", 2)
    bar.step("tree 1/2 train logloss 0.5")
    bar.step("tree 2/2 train logloss 0.4")
    bar.end("done")
    lines = file.getvalue().splitlines()
    assert lines == ["training 2 trees", "tree 1/2 train logloss 0.5", "tree 2/2 train logloss 0.4"]


def test_console_styles(capsys: pytest.CaptureFixture[str]) -> None:
    assert Console().bars
    assert not Console(quiet=True).bars
    assert not Console(log_format="json").bars
    for console, shown in ((Console(), True), (Console(quiet=True), False)):
        handler = console.configure()
        try:
            logging.getLogger("p2pboost.x").info("hello")
            logging.getLogger("p2pboost.x").warning("careful")
        finally:
            unconfigure(handler)
        err = capsys.readouterr().err
        assert ("hello" in err) is shown
        assert "careful" in err
    assert not logging.getLogger("p2pboost").handlers


class _Steps:
    """A reporter that keeps the bar's labels."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def info(self, message: str) -> None: ...

    def begin(self, label: str, total: int) -> None: ...

    def step(self, label: str, record: object = None) -> None:
        self.steps.append(label)

    def progress(self, tick: Tick) -> None: ...

    def end(self, message: str) -> None: ...


def test_tree_times_are_per_tree_with_the_total_labelled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tree 2 took 3 s of a 5 s run: the line says 3.0 s for it, 5.0 s in all (not "(5.0 s)")."""
    now = iter([10.0, 12.0, 15.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    steps = _Steps()
    on_tree = _tree_callback(cast(Any, SimpleNamespace(reporter=steps)))
    for i in range(2):
        on_tree(CallbackEnv(i, 2, {"train": {"logloss": 0.5 - i / 10}}))
    assert steps.steps == [
        "tree 1/2 train logloss 0.5000 (2.0 s, 2.0 s in all, about 2.0 s left)",
        "tree 2/2 train logloss 0.4000 (3.0 s, 5.0 s in all)",
    ]


def test_tree_clock_laps() -> None:
    now = iter([0.0, 0.25, 0.5, 2.5])
    clock = TreeClock(lambda: next(now))
    assert [clock.lap() for _ in range(3)] == [
        "(0.2 s, 0.2 s in all)",
        "(0.2 s, 0.5 s in all)",
        "(2.0 s, 2.5 s in all)",
    ]


class _Ticks:
    def __init__(self) -> None:
        self.ticks: list[Tick] = []

    def info(self, message: str) -> None: ...

    def begin(self, label: str, total: int) -> None: ...

    def step(self, label: str, record: object = None) -> None: ...

    def progress(self, tick: Tick) -> None:
        self.ticks.append(tick)

    def end(self, message: str) -> None: ...


def test_a_tick_reads_as_counts_and_eta_and_records_the_same() -> None:
    tick = Tick("PSI", 12_000, 50_000, "ids blinded", 2.4)
    assert tick.text() == "PSI: 12,000/50,000 ids blinded (24%), 2.4 s, about 7.6 s left"
    assert tick.record() == {
        "progress": "PSI",
        "done": 12_000,
        "total": 50_000,
        "unit": "ids blinded",
        "elapsed_s": 2.4,
        "eta_s": 7.6,
    }
    assert Tick("training", 3, None, "trees", 1.0).text() == "training: 3 trees, 1.0 s"
    assert Tick("PSI", 5, 5, "ids blinded", 1.0).text() == "PSI: 5/5 ids blinded (100%), 1.0 s"


def test_a_meter_reports_at_most_every_second_and_always_the_end() -> None:
    now = iter([0.0, 0.1, 0.5, 1.2, 1.3, 1.4])
    ticks = _Ticks()
    meter = Meter(ticks, "PSI", "ids blinded", clock=lambda: next(now))
    for done in (10, 20, 30, 40, 50):
        meter.update(done, 50)
    assert [(t.done, t.elapsed) for t in ticks.ticks] == [(10, 0.1), (30, 1.2), (50, 1.4)]


def test_json_mode_writes_progress_as_records(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console(log_format="json")
    handler = console.configure()
    try:
        reporter = console.reporter("host")
        reporter.progress(Tick("training", 2, 4, "trees", 3.0))
        reporter.step("tree 1/4", {"progress": "training", "done": 1, "total": 4})
    finally:
        unconfigure(handler)
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert records[0]["message"] == "training: 2/4 trees (50%), 3.0 s, about 3.0 s left"
    assert (records[0]["done"], records[0]["total"], records[0]["eta_s"]) == (2, 4, 3.0)
    assert (records[1]["progress"], records[1]["done"]) == ("training", 1)
    assert all(r["level"] == "info" for r in records)


def test_a_hosts_progress_tells_the_meter_each_tree_and_the_end() -> None:
    from p2pboost.app._progress import host_progress
    from p2pboost.hetero.training.common import HostPhase

    ticks = _Ticks()
    progress = host_progress(Meter(ticks, "training", "trees", every=0.0), 3)
    for tree in range(3):  # the protocol sets the tree as it starts
        progress.tree = tree
        progress.enter(HostPhase.ROOT)
    progress.enter(HostPhase.DONE)
    assert [(t.done, t.total) for t in ticks.ticks] == [(1, 3), (2, 3), (3, 3)]
    assert progress.tree == 2
