"""``p2pboost audit`` on the two-laptops example's party files: the federation in one process,
the attacks on what each party receives, and the options that reduce them; a host file that
is not on this machine becomes a stand-in the table marks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from p2pboost.app.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-laptops"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for name in ("guest.toml", "host.toml", "make_data.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    subprocess.run([sys.executable, "make_data.py"], cwd=tmp_path, check=True, capture_output=True)
    return tmp_path


def _figures(out: str, option: str) -> list[float]:
    line = next(line for line in out.splitlines() if line.strip().startswith(option))
    return [float(v) for v in re.findall(r"[-+]?\d+\.\d+", line.split(option, 1)[1])]


@pytest.mark.slow
def test_audit_prints_what_each_partner_infers(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(files / "guest.toml"), str(files / "host.toml")]) == 0
    out = capsys.readouterr().out
    assert "359 aligned rows" in out  # the ids both files hold, as PSI finds them
    assert "1024-bit ou keys for the audit only" in out
    assert "host 'host' (" in out
    assert "[STAND-IN]" not in out
    alone = float(re.search(r"own features alone: (\d\.\d+)", out).group(1))  # type: ignore[union-attr]
    attack, excess, test_auc = _figures(out, "as configured")[:3]
    assert excess == pytest.approx(attack - alone, abs=2e-3)
    assert test_auc > 0.95
    assert "recommended: host_depth=1, guest_depth=2, purity_bound=0.2" in out
    assert "-> mix: excess" in out
    order = re.search(r"inference bits with Spearman (-?\d\.\d+); the scores alone give", out)
    assert order is not None
    assert float(order.group(1)) > 0.5


@pytest.mark.slow
def test_audit_stands_in_for_a_host_file_not_on_this_machine(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (files / "host.csv").unlink()
    assert main(["audit", str(files / "guest.toml"), str(files / "host.toml")]) == 0
    out = capsys.readouterr().out
    assert "host 'host' [STAND-IN] (stand-in: 10 random columns" in out
    assert "not on this machine" in out
    alone = float(re.search(r"own features alone: (\d\.\d+)", out).group(1))  # type: ignore[union-attr]
    assert abs(alone - 0.5) < 0.2  # random columns say little about the labels


def test_audit_needs_one_guest_and_its_hosts(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(files / "host.toml")]) == 1
    assert "exactly one guest's and its hosts'" in capsys.readouterr().err
