"""``python -m benchmarks resume`` end to end: ``p2pboost party`` processes over mutual TLS, one
SIGKILLed mid-training and started again with ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import resume

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


def test_bad_cases_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        resume.main(["--cases", "homo_server"])
    assert "--cases" in capsys.readouterr().err
