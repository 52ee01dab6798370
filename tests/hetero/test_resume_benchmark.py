"""``python -m benchmarks resume`` end to end: ``p2pboost party`` processes over mutual TLS, one
SIGKILLed mid-training and started again with ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import resume
from tests._tiny_data import write_csv

#: Whole federations of processes: tens of seconds (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


def test_a_killed_host_resumes_to_the_uninterrupted_model(
    tiny_vertical: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--dataset", "breast", "--trees", "4", "--depth", "2", "--bins", "8"]
    argv += ["--kill-after", "2", "--cases", "host", "--data-dir", str(tiny_vertical)]
    assert resume.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert result["benchmark"] == "resume"
    (case,) = result["cases"]
    assert set(case) == {"kill", "identical", "trees_redone", "recovery_s"}
    assert case["kill"] == "host"
    assert case["identical"] is True
    assert 0 <= case["trees_redone"] <= 1
    assert case["recovery_s"] > 0


def test_a_killed_homo_server_or_client_comes_back_to_the_uninterrupted_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three clients and a server as processes: the server killed and resumed from its
    checkpoint, or a client killed and taken back by the running server."""
    rng = np.random.default_rng(2)
    for part in ("homo_guest", "homo_host_1", "homo_host_2"):
        X = rng.normal(size=(150, 4))
        y = (X[:, 0] - X[:, 1] > 0).astype(np.float64)
        ids = np.arange(150, dtype=np.float64)
        header = ["id", "y", *(f"x{j}" for j in range(4))]
        write_csv(tmp_path / f"breast_{part}.csv", header, np.column_stack([ids, y, X]))
    argv = ["--dataset", "breast", "--trees", "5", "--depth", "2", "--bins", "8"]
    argv += ["--kill-after", "2", "--cases", "homo_server,homo_client"]
    assert resume.main([*argv, "--data-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cases = {c["kill"]: c for c in result["cases"]}
    assert set(cases) == {"homo_server", "homo_client"}
    for case in cases.values():
        assert case["identical"] is True
        assert 0 <= case["trees_redone"] <= 1
        assert case["recovery_s"] > 0


def test_bad_cases_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        resume.main(["--cases", "homo_nobody"])
    assert "--cases" in capsys.readouterr().err
