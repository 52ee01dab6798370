"""``p2pboost init``: a federation written for local trials trains when its README's commands
run (each party its own process, mutual TLS on loopback)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from p2pboost.app.cli import main
from p2pboost.app.model_info import load_model
from tests.cli.conftest import finish, free_port, start_cli


def _run_readme(directory: Path) -> dict[str, dict[str, object]]:
    """Every command of the README, each as its own process, in the written order."""
    readme = (directory / "README.md").read_text()
    commands = re.findall(r"^\d+\. `p2pboost (party --config \S+)`$", readme, re.MULTILINE)
    assert commands, readme
    procs = [start_cli(*command.split(), cwd=directory) for command in commands]
    results = {}
    for proc in procs:
        code, out, err = finish(proc, 180)
        assert code == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        results[str(summary["party"])] = summary
    return results


@pytest.mark.slow
def test_a_vertical_federation_trains_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fed = tmp_path / "fed"
    args = ["init", str(fed), "--guest", "bank", "--hosts", "telco,bureau", "--trees", "3"]
    assert main([*args, "--key-bits", "1024", "--port", str(free_port())]) == 0
    assert "p2pboost party --config bank.toml" in capsys.readouterr().out
    for party in ("bank", "telco", "bureau"):
        assert main(["config", "check", str(fed / f"{party}.toml")]) == 0
    results = _run_readme(fed)
    assert results["bank"]["trees"] == 3
    guest = load_model(fed / "out-bank" / "model.json")
    assert guest.feature_names == [f"g{j}" for j in range(10)]  # the CSV header
    for host in ("telco", "bureau"):
        assert load_model(fed / f"out-{host}" / "model.json").feature_names is not None


@pytest.mark.slow
def test_a_horizontal_federation_trains_as_written(tmp_path: Path) -> None:
    fed = tmp_path / "fed"
    args = ["init", str(fed), "--server", "hub", "--clients", "clinic-a,clinic-b", "--trees", "2"]
    assert main([*args, "--port", str(free_port())]) == 0
    results = _run_readme(fed)
    assert results["hub"]["trees"] == 2
    models = {p: json.loads((fed / f"out-{p}" / "model.json").read_text()) for p in results}
    clients = {json.dumps(m, sort_keys=True) for p, m in models.items() if p != "hub"}
    assert len(clients) == 1  # every client holds the same model
    for model in models.values():  # the server's too, but for the covers and gains it keeps
        for tree in model["trees"]:
            assert any(tree.pop("cover")) == any(tree.pop("gain")) == (model is models["hub"])
    assert len({json.dumps(m, sort_keys=True) for m in models.values()}) == 1


def test_init_refuses_what_cannot_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "a"), "--guest", "g"]) == 1
    assert "at least one host" in capsys.readouterr().err
    assert main(["init", str(tmp_path / "b"), "--guest", "g", "--server", "s"]) == 1
    assert "either a guest and hosts, or a server and clients" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["init", str(tmp_path / "full"), "--guest", "g", "--hosts", "h"]) == 1
    assert "not empty" in capsys.readouterr().err
