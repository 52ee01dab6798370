"""``python -m benchmarks psi`` runs end to end and predicts its scaling from its task trace."""

from __future__ import annotations

import json

import pytest

from benchmarks import psi

pytestmark = pytest.mark.slow


def test_psi_end_to_end_with_its_scaling(capsys: pytest.CaptureFixture[str]) -> None:
    assert psi.main(["--n", "600", "--overlap", "0.5"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["correct"] is True
    assert result["intersection"] == 300
    scaling = result["scaling"]
    assert list(scaling) == ["8", "16", "32", "64"]
    seconds = [entry["seconds"] for entry in scaling.values()]
    assert all(0 < s <= result["seconds"] * 2 for s in seconds)
    # More workers never take much longer (list scheduling allows small anomalies).
    assert max(seconds) <= seconds[0] * 1.1
    assert all(0 < entry["efficiency"] <= 1.0 for entry in scaling.values())


def test_psi_trace_workers(capsys: pytest.CaptureFixture[str]) -> None:
    """``--trace-workers`` has both parties cut their work for that many workers; the result
    stays correct and the replay is of that trace."""
    assert psi.main(["--n", "600", "--overlap", "0.5", "--trace-workers", "4"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["correct"] is True
    assert list(result["scaling"]) == ["8", "16", "32", "64"]
    with pytest.raises(SystemExit):
        psi.main(["--n", "600", "--trace-workers", "0"])
