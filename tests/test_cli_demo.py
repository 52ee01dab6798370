"""The README's main job: ``p2pboost demo`` runs, reports a sane metric and a JSON last line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2pboost.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_demo_prints_json_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--trees", "10", "--depth", "3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["mode"] == "plain"
    assert result["trees"] == 10
    assert result["metric"] == "auc"
    assert 0.95 <= result["auc"] <= 1.0
    assert result["s_per_tree"] > 0


def test_demo_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--trees", "0"]) == 1
    assert "at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--mode", "nonsense"])
    assert exc.value.code == 2


def test_console_script_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "p2pboost.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "demo" in out
    assert "certs" in out


def test_plaintext_example_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "plaintext" / "train.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "predicts identically: True" in proc.stdout
    assert (tmp_path / "breast.json").is_file()
