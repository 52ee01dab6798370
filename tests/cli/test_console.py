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
from p2pboost.app._progress import TreeClock
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

    def step(self, label: str) -> None:
        self.steps.append(label)

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
        "tree 1/2 train logloss 0.5000 (2.0 s, 2.0 s in all)",
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
