"""``p2pboost init``: a federation written for local trials trains when its README's commands
run (each party its own process, mutual TLS on loopback)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from p2pboost.app.cli import main
from p2pboost.app.model_info import load_model
from p2pboost.hetero.model import GuestModel
from tests.cli.conftest import finish, free_port, start_cli


def _run_readme(directory: Path, pattern: str = r"^\d+\. ") -> dict[str, dict[str, Any]]:
    """Every training command of the README (or, with ``pattern = "^- "``, every scoring
    command), each as its own process, in the written order."""
    readme = (directory / "README.md").read_text()
    found = re.findall(pattern + r"`p2pboost ((?:party|predict) --config \S+)`$", readme, re.M)
    commands = [c for c in found if c.startswith("predict" if pattern == "^- " else "party")]
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
    # the held-out rows: the same ids at every party, none of them trained on
    held = {p: _ids(fed / f"{p}-holdout.csv") for p in ("bank", "telco", "bureau")}
    assert held["bank"] == held["telco"] == held["bureau"]
    assert len(held["bank"]) == round(0.2 * 569)
    assert not set(held["bank"]) & set(_ids(fed / "bank.csv"))
    # the guest validated on them and compared itself with a guest-only model
    assert isinstance(guest, GuestModel)
    assert list(guest.history) == ["train", "valid"]
    assert results["bank"]["validation"]["valid_rows"] == len(held["bank"])
    assert set(results["bank"]["gain_share"]) == {"guest", "telco", "bureau"}
    # the README's scoring commands, verbatim: the guest scores the held-out rows only
    scored = _run_readme(fed, "^- ")
    assert scored["bank"]["rows"] == scored["bank"]["scored"] == len(held["bank"])
    assert _ids(fed / "out-bank" / "predictions.csv") == held["bank"]


def _ids(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return [row["id"] for row in csv.DictReader(fh)]


@pytest.mark.slow
def test_a_horizontal_federation_trains_as_written(tmp_path: Path) -> None:
    fed = tmp_path / "fed"
    args = ["init", str(fed), "--server", "hub", "--clients", "clinic-a,clinic-b", "--trees", "2"]
    assert main([*args, "--port", str(free_port())]) == 0
    results = _run_readme(fed)
    assert results["hub"]["trees"] == 2
    models = {p: json.loads((fed / f"out-{p}" / "model.json").read_text()) for p in results}
    for party, model in models.items():  # the server keeps the covers and gains, alone
        for tree in model["trees"]:
            assert any(tree.pop("cover")) == any(tree.pop("gain")) == (party == "hub")
    assert len({json.dumps(m, sort_keys=True) for m in models.values()}) == 1  # the same trees
    scored = _run_readme(fed, "^- ")  # each client scores its own held-out rows
    assert set(scored) == {"clinic-a", "clinic-b"}
    for client in scored:
        held = _ids(fed / f"{client}-holdout.csv")
        assert scored[client]["rows"] == len(held) > 0
        assert not set(held) & set(_ids(fed / f"{client}.csv"))


def test_init_refuses_what_cannot_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "a"), "--guest", "g"]) == 1
    assert "at least one host" in capsys.readouterr().err
    assert main(["init", str(tmp_path / "b"), "--guest", "g", "--server", "s"]) == 1
    assert "either a guest and hosts, or a server and clients" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["init", str(tmp_path / "full"), "--guest", "g", "--hosts", "h"]) == 1
    assert "not empty" in capsys.readouterr().err
