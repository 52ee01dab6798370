"""``python -m benchmarks hetero`` runs end to end: separate processes, WebSocket + mTLS."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks import hetero
from p2pboost.hetero.training.common import GuestPhase
from p2pboost.workers import process_pool

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
        "kernel",
        "pool",
        "scaling",
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
    assert result["kernel"] in ("native", "gmpy2")
    if os.environ.get("P2PBOOST_POOL", "auto") == "auto":  # threads only where the GIL is free
        assert result["pool"] == ("threads" if result["kernel"] == "native" else "processes")
    assert set(result["scaling"]) == {"paillier"}
    _check_scaling(result["scaling"]["paillier"])


def _check_scaling(scaling: dict[str, Any]) -> None:
    """Predicted seconds per tree for 8 to 64 workers, not longer with more workers, and
    efficiencies in (0, 1] that fall as the work is spread thinner."""
    assert list(scaling) == ["8", "16", "32", "64"]
    seconds = [scaling[w]["s_per_tree"] for w in scaling]
    efficiency = [scaling[w]["efficiency"] for w in scaling]
    assert all(s > 0 for s in seconds)
    # More workers never take much longer (list scheduling allows small anomalies).
    assert max(seconds) <= seconds[0] * 1.1
    assert all(0 < e <= 1.0 for e in efficiency)
    assert efficiency == sorted(efficiency, reverse=True)


def _kernel_here() -> str | None:
    return os.environ.get(hetero.KERNEL_ENV)


def test_the_kernel_reaches_processes_started_in_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(hetero.KERNEL_ENV, raising=False)
    with hetero.environment(**{hetero.KERNEL_ENV: "native"}), process_pool(1) as pool:
        assert pool.submit(_kernel_here).result() == "native"
    assert hetero.KERNEL_ENV not in os.environ
    with hetero.environment(**{hetero.KERNEL_ENV: None}), process_pool(1) as pool:
        assert pool.submit(_kernel_here).result() is None


def test_compare_kernels_runs_every_scheme_with_both(
    tiny_vertical: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--dataset", "breast", "--key-bits", "1024", "--trees", "1", "--depth", "2"]
    argv += ["--bins", "8", "--workers", "1", "--data-dir", str(tiny_vertical)]
    assert hetero.main([*argv, "--compare-schemes", "--compare-kernels"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(result["kernels"]) == ["native", "gmpy2"]
    for per_scheme in result["kernels"].values():
        assert set(per_scheme) == {"paillier", "ou"}
        for run in per_scheme.values():
            assert run["s_per_tree"] > 0
            assert run["floor_s_per_tree"] > 0
            assert run["kernel"] in ("native", "gmpy2")
    assert result["kernels"]["gmpy2"]["ou"]["kernel"] == "gmpy2"
    if os.environ.get("P2PBOOST_POOL", "auto") == "auto":  # gmpy2 holds the GIL: processes
        assert result["kernels"]["gmpy2"]["ou"]["pool"] == "processes"
        assert result["kernels"]["native"]["ou"]["pool"] == "threads"
    assert set(result["native_over_gmpy2"]) == {"paillier", "ou"}
    assert result["identical_trees"] is True
    assert set(result["scaling"]) == {"paillier", "ou"}
    for scaling in result["scaling"].values():
        _check_scaling(scaling)
