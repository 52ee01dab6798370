"""Top-level options after the subcommand, and JSON-only stderr in JSON mode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.cli import hoist_globals, main
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams


def test_hoisting_moves_only_the_global_options() -> None:
    assert hoist_globals(["inspect", "m.json", "-q", "--log-format", "json"]) == [
        "-q",
        "--log-format",
        "json",
        "inspect",
        "m.json",
    ]
    assert hoist_globals(["party", "g.toml", "--log-level=debug"]) == [
        "--log-level=debug",
        "party",
        "g.toml",
    ]
    # Before the subcommand they stay; after "--" nothing moves.
    assert hoist_globals(["-q", "demo", "--", "-q"]) == ["-q", "demo", "--", "-q"]


def test_global_options_work_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    train(BoostParams(n_estimators=2), X, (X[:, 0] > 0).astype(float)).save(tmp_path / "m.json")
    assert main(["inspect", str(tmp_path / "m.json"), "--json", "--log-format", "json", "-q"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["n_trees"] == 2
    assert out.err == ""


def test_json_mode_writes_errors_as_json_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file that does not exist: the command's own error.
    assert main(["inspect", str(tmp_path / "missing.json"), "--log-format", "json"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    record = json.loads(err[0])
    assert record["level"] == "error"
    assert "missing.json" in record["message"]
    # A bad command line: a usage record, exit status 2 as for any argument parser.
    with pytest.raises(SystemExit) as exit_:
        main(["--log-format", "json", "inspect", "--no-such-option"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    usage = json.loads(lines[0])
    assert usage["level"] == "error"
    assert usage["message"].startswith("usage: ")
    assert "--no-such-option" in usage["message"]
