"""``p2pboost config check FILE``: a party checks its file and what it points to, alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2pboost.app.cli import main
from tests.cli.conftest import free_port, party_configs


def test_a_ready_party_is_ready(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    guest, host = party_configs(tmp_path, cert_root, port=free_port())
    assert main(["config", "check", str(guest)]) == 0
    out = capsys.readouterr().out
    assert "name party 'guest'" in out
    assert "550 rows, 10 features, label 'y'" in out
    assert out.strip().endswith("ready")
    assert main(["config", "check", "--json", str(host)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["problems"] == []


def test_every_problem_is_listed(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    guest, _ = party_configs(tmp_path, cert_root, port=free_port())
    text = guest.read_text()
    text = text.replace(str(cert_root / "guest"), str(cert_root / "host"))  # another party's
    text = text.replace('label_column = "y"', 'label_column = "target"')
    text = text.replace('task = "train"', 'task = "predict"')
    broken = tmp_path / "broken.toml"
    broken.write_text(text)
    assert main(["config", "check", "--json", str(broken)]) == 1
    report = json.loads(capsys.readouterr().out)
    problems = "\n".join(report["problems"])
    assert "certificate" in problems
    assert "for party 'host'" in problems
    assert "model" in problems  # predict needs the model file, which is not there yet
    assert len(report["problems"]) == 2  # a scoring file may lack the label: not a problem
    text = text.replace('task = "predict"', 'task = "train"')
    broken.write_text(text)
    assert main(["config", "check", str(broken)]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM  data: " in out
    assert "no label column 'target'" in out
    assert out.strip().endswith("2 problem(s)")


def test_a_file_that_does_not_load_stops_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "guest"\nrole = "guest"\nn_estimator = 3\n')
    assert main(["config", "check", "--json", str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert len(report["problems"]) == 1
    assert report["problems"][0].startswith("the file: ")
