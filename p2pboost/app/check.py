"""``p2pboost config check FILE``: everything a party's run needs, checked without running it.

A federation's first run fails on whatever each party got wrong: a typo in a key, a
certificate for another party, a CSV without its label column, a model file that is not there.
Each of those ends the run after the other parties waited for this one. So a party can check
its file alone first: the file itself (strict keys and types, as ``party`` reads it), the
certificate directory (files present, certificate and key matching, naming this party), the
data CSV (id, label and feature columns, unique ids), and the files its task reads (the
model for ``predict`` and ``serve``, ``init_model`` for a warm start). No peer is contacted and
nothing is written. Every problem is listed, not only the first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2pboost.app.config import PartyConfig, Role, Task, load_config
from p2pboost.exceptions import P2PBoostError

__all__ = ["CheckReport", "check_config"]


@dataclass
class CheckReport:
    """What was checked (``checked``, one line each) and what is wrong (``problems``)."""

    source: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def run(self, what: str, check: Callable[[], str | None]) -> None:
        """Run one check: its success line (or ``what``), or the error it raised."""
        try:
            said = check()
        except (P2PBoostError, OSError, ValueError) as exc:
            self.problems.append(f"{what}: {exc}")
        else:
            self.checked.append(said or what)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.source,
            "ok": self.ok,
            "checked": self.checked,
            "problems": self.problems,
        }


def check_config(path: str | os.PathLike[str]) -> CheckReport:
    """Check the party file at ``path`` and what it points to (see the module docstring)."""
    report = CheckReport(str(path))
    config: PartyConfig | None = None

    def load() -> str:
        nonlocal config
        config = load_config(path)
        return f"the file: party {config.id!r}, {config.role.value}, task {config.task.value}"

    report.run("the file", load)
    if config is None:
        return report
    report.run("certificates", lambda: _certificates(config))
    if config.data is not None:
        needs_label = config.task is Task.TRAIN and config.role in (Role.GUEST, Role.CLIENT)
        report.run("data", lambda: _data(config, needs_label))
    if config.task in (Task.PREDICT, Task.SERVE) and config.role is not Role.SERVER:
        report.run("model", lambda: _model(config.model_path))
    if config.task is Task.TRAIN and config.init_model_path is not None:
        report.run("init_model", lambda: _model(config.init_model_path))
    return report


def _certificates(config: PartyConfig) -> str:
    from p2pboost.app.party import build_node

    build_node(config)  # loads ca.pem, cert.pem, key.pem and checks the party id
    return f"certificates in {config.certs} name party {config.id!r}"


def _data(config: PartyConfig, needs_label: bool) -> str:
    from p2pboost.app._tables import load_table

    assert config.data is not None
    table = load_table(config.data, require_label=needs_label)
    label = "" if table.y is None else f", label {config.data.label_column!r}"
    return f"data {config.data.path}: {table.ids.size} rows, {len(table.features)} features{label}"


def _model(path: Path | None) -> str:
    from p2pboost.app.model_info import kind_of, load_model

    assert path is not None
    return f"model {path}: a {kind_of(load_model(path)).value} model file"
