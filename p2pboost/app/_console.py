"""What the ``p2pboost`` command writes on stderr: log records and progress bars.

stdout carries results only (a summary and, last, one JSON line), so scripts can parse it while
people watch stderr. Three styles: text logs with progress bars (the default, for people at a
terminal), ``--quiet`` (warnings and errors only), and ``--log-format json`` (one JSON object
per record, for services and log shippers; no bars, whose redraws would garble them).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import click

if TYPE_CHECKING:
    from p2pboost.app._progress import Tick
    from p2pboost.app.party import Reporter

__all__ = ["BarReporter", "Console", "JsonFormatter", "TextFormatter", "unconfigure"]

#: The package's logger: the command configures it, never the root logger of an embedding app.
LOGGER = "p2pboost"
#: Attributes every LogRecord has; anything else was passed with ``extra=`` and is kept.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, extras."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(
            {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        )
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """``12:01:02 guest: message``: time and the last part of the logger's name."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(short)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        record.short = record.name.rsplit(".", 1)[-1]
        return super().format(record)


class BarReporter:
    """Progress bars (``click.progressbar``) on stderr; messages as log records.

    Off a terminal, click prints each new label on its own line instead of redrawing a bar,
    so a redirected stderr still shows every tree and its metric.
    """

    def __init__(self, log: logging.Logger, file: TextIO) -> None:
        self.log = log
        self.file = file
        self._bar: Any = None

    def info(self, message: str) -> None:
        self.log.info(message)

    def begin(self, label: str, total: int) -> None:
        self._close()
        self._bar = click.progressbar(length=total, label=label, file=self.file, show_pos=True)
        self._bar.__enter__()

    def step(self, label: str, record: Mapping[str, Any] | None = None) -> None:
        if self._bar is None:
            self.log.info(label)
            return
        self._bar.label = label
        self._bar.update(1)
        if self._bar.pos >= self._bar.length:  # done: log lines may follow without a bar
            self._close()

    def progress(self, tick: Tick) -> None:
        self.log.info(tick.text())

    def end(self, message: str) -> None:
        self._close()
        self.log.info(message)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


@dataclass(frozen=True, slots=True)
class Console:
    """The command's output settings (the global options)."""

    quiet: bool = False
    log_format: str = "text"
    log_level: str = "info"

    @property
    def bars(self) -> bool:
        return not self.quiet and self.log_format == "text"

    def configure(self) -> logging.Handler:
        """Send the package's log records to stderr in the chosen style; returns the handler
        (the caller removes it, so repeated in-process runs never stack handlers)."""
        handler = logging.StreamHandler(sys.stderr)
        if self.log_format == "json":
            handler.setFormatter(JsonFormatter())
        else:
            handler.setFormatter(TextFormatter())
        log = logging.getLogger(LOGGER)
        log.addHandler(handler)
        log.setLevel(logging.WARNING if self.quiet else self.log_level.upper())
        log.propagate = False
        return handler

    def tree_progress(self, name: str) -> Callable[[str, int, int, str], None] | None:
        """The demo's per-tree callback: a bar when bars are on, else None (log lines)."""
        if not self.bars:
            return None
        bar = BarReporter(logging.getLogger(f"{LOGGER}.{name}"), sys.stderr)

        def on_tree(party: str, done: int, total: int, label: str) -> None:
            if done == 1:
                bar.begin(f"{party}: training {total} trees", total)
            bar.step(f"{party}: {label}")

        return on_tree

    def reporter(self, name: str) -> Reporter:
        """A :class:`~p2pboost.app.party.Reporter`: bars for people, log records otherwise."""
        from p2pboost.app.party import LogReporter

        log = logging.getLogger(f"{LOGGER}.{name}")
        return BarReporter(log, sys.stderr) if self.bars else LogReporter(log)


def unconfigure(handler: logging.Handler) -> None:
    log = logging.getLogger(LOGGER)
    log.removeHandler(handler)
    log.propagate = True
    log.setLevel(logging.NOTSET)
