"""``python -m benchmarks hetero`` runs end to end: separate processes, WebSocket + mTLS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import hetero
from p2pboost.hetero._common import GuestPhase

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


def test_phase_clock_charges_the_phase_left() -> None:
    clock = hetero.PhaseClock(GuestPhase.SETUP)
    clock.enter(GuestPhase.ENCRYPT, 0)
    clock.enter(GuestPhase.SETUP)
    clock.enter(GuestPhase.DONE)
    assert set(clock.seconds) == {"setup", "encrypt"}
    assert all(s >= 0 for s in clock.seconds.values())
    assert clock.phase is GuestPhase.DONE


def test_two_hosts_end_to_end(tiny_vertical: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--dataset", "breast", "--hosts", "2", "--key-bits", "1024", "--trees", "2"]
    argv += ["--depth", "2", "--bins", "8", "--workers", "1", "--data-dir", str(tiny_vertical)]
    assert hetero.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert set(result) == {
        "benchmark",
        "dataset",
        "rows",
        "key_bits",
        "s_per_tree",
        "floor_s_per_tree",
        "tables_s",
        "phases",
        "auc",
        "xgboost_auc",
        "bytes_per_tree",
    }
    assert result["benchmark"] == "hetero"
    assert result["dataset"] == "breast"
    assert result["rows"] == 200
    assert result["key_bits"] == 1024
    for key in ("s_per_tree", "floor_s_per_tree", "tables_s"):
        assert isinstance(result[key], float)
        assert result[key] > 0
    assert isinstance(result["bytes_per_tree"], int)
    # At least the 200 gradient ciphertexts of 256 bytes per tree went to each host.
    assert result["bytes_per_tree"] > 2 * 200 * 256
    assert set(result["phases"]) == {"guest", "host1", "host2"}
    assert {"setup", "encrypt", "splits", "decide", "partition"} <= set(result["phases"]["guest"])
    assert "root" in result["phases"]["host1"]
    for per_phase in result["phases"].values():
        assert all(isinstance(s, float) and s >= 0 for s in per_phase.values())
    # Two depth-2 trees on a label of guest and host features: clearly better than chance, and
    # in the neighbourhood of xgboost with the same parameters.
    assert 0.75 < result["auc"] <= 1.0
    assert abs(result["auc"] - result["xgboost_auc"]) < 0.1
    assert any("s_per_tree / floor_s_per_tree" in line for line in out)
