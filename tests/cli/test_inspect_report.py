"""``p2pboost inspect`` and ``p2pboost report`` on a model file (the commands are thin: the
descriptions and plots are tested in tests/test_model_info.py and tests/test_report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.datasets import load_breast_cancer

from p2pboost.app.cli import main
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    X, y = load_breast_cancer(return_X_y=True)
    path = tmp_path_factory.mktemp("model") / "breast.json"
    params = BoostParams(n_estimators=3, max_depth=2)
    train(params, X[:300], y[:300], eval_sets=[(X[300:], y[300:])]).save(path)
    return path


def test_inspect_text_and_json(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(model)]) == 0
    text = capsys.readouterr().out
    assert "breast.json" in text
    assert main(["inspect", str(model), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["n_trees"] == 3
    assert described["n_features"] == 30


def test_inspect_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text('{"format": "nothing"}')
    assert main(["inspect", str(tmp_path / "x.json")]) == 1
    assert main(["inspect", str(tmp_path / "missing.json")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert all(line.startswith("p2pboost: error: ") for line in err)
    assert "missing.json" in err[1]


def test_report_writes_pngs(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(model), "--out", str(tmp_path / "plots")]) == 0
    written = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert {p.name for p in written} == {"breast_importance.png", "breast_learning_curve.png"}
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_writes_beside_each_model_by_default(
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As in an `init` federation: every party's file is `out-<party>/model.json`, and reports
    run from the federation's directory must not land on one another in it."""
    for party in ("guest", "host1"):
        (tmp_path / f"out-{party}").mkdir()
        (tmp_path / f"out-{party}" / "model.json").write_bytes(model.read_bytes())
    monkeypatch.chdir(tmp_path)
    for party in ("guest", "host1"):
        assert main(["report", f"out-{party}/model.json"]) == 0
        written = [Path(line) for line in capsys.readouterr().out.splitlines()]
        assert [p.parent for p in written] == [Path(f"out-{party}")] * 2
    assert not list(tmp_path.glob("*.png"))
    assert (tmp_path / "out-guest" / "model_importance.png").is_file()
    assert (tmp_path / "out-host1" / "model_importance.png").is_file()


def test_report_refuses_to_overwrite_without_force(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plots"
    assert main(["report", str(model), "--out", str(out)]) == 0
    capsys.readouterr()
    existing = out / "breast_learning_curve.png"
    existing.write_bytes(b"someone else's plot")
    assert main(["report", str(model), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("p2pboost: error: ")
    assert "breast_importance.png already exists" in err
    assert "--force" in err
    assert existing.read_bytes() == b"someone else's plot"  # nothing was written
    assert main(["report", str(model), "--out", str(out), "--force"]) == 0
    assert existing.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
