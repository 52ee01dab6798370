"""Top-level options after the subcommand, and JSON-only stderr in JSON mode."""

from __future__ import annotations

import json
import re
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


def _every_help() -> dict[str, str]:
    """The ``--help`` text of the command and of every subcommand, by command path."""
    import click

    from p2pboost.app.cli import cli

    texts: dict[str, str] = {}

    def visit(command: click.Command, parent: click.Context | None, path: str) -> None:
        with click.Context(command, info_name=path.split()[-1], parent=parent) as ctx:
            texts[path] = command.get_help(ctx)
            if isinstance(command, click.Group):
                for name, sub in command.commands.items():
                    visit(sub, ctx, f"{path} {name}")

    visit(cli, None, "p2pboost")
    return texts


def test_help_points_to_docs_pages_that_exist() -> None:
    """A user reading ``--help`` is sent to a page of the docs, not to a Python module."""
    root = Path(__file__).resolve().parents[2]
    texts = _every_help()
    modules = {
        path: re.findall(r"\bp2pboost\.[a-z_]+(?:\.[a-z_]+)*", " ".join(text.split()))
        for path, text in texts.items()
    }
    assert not {p: m for p, m in modules.items() if m}, "--help names Python modules"
    pages = {page for text in texts.values() for page in re.findall(r"docs/[\w/.-]+\.md", text)}
    assert "docs/reference/config.md" in " ".join(texts["p2pboost party"].split())
    assert {"docs/README.md", "docs/reference/cli.md"} <= pages
    assert all((root / page).is_file() for page in pages), pages
