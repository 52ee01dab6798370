"""``python -m benchmarks wide`` runs end to end and measures what the sparse path saves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import wide
from tests._tiny_data import write_csv

#: Whole federations (three runs): seconds (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


def test_sparse_host_features_cost_fewer_additions_for_the_same_trees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    n, m = 240, 12
    ids = np.arange(n, dtype=np.float64)
    guest = rng.normal(size=(n, 2))
    host = rng.exponential(size=(n, m))
    host[rng.random((n, m)) < 0.9] = 0.0  # 90 % zeros
    y = (guest[:, 0] + host[:, 0] + host[:, 1] > 0.3).astype(np.float64)
    write_csv(
        tmp_path / "synth_wide_hetero_guest.csv",
        ["id", "y", "g0", "g1"],
        np.column_stack([ids, y, guest]),
    )
    write_csv(
        tmp_path / "synth_wide_hetero_host.csv",
        ["id", *(f"x{j}" for j in range(m))],
        np.column_stack([ids, host]),
    )
    argv = ["--dataset", "synth_wide", "--trees", "2", "--depth", "3", "--bins", "8"]
    argv += ["--colsample", "0.5", "--workers", "1", "--data-dir", str(tmp_path)]
    argv += ["--memory-budget-mb", "0.05"]  # about two nodes' histograms
    assert wide.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "wide"
    assert result["host_features"] == m
    assert result["identical_trees"] is True
    dense, sparse, col = (result[f"host_additions_{k}"] for k in ("dense", "sparse", "colsample"))
    assert 0 < sparse < dense / 2  # 90 % zeros: most additions are skipped
    assert 0 < col < sparse
    assert result["s_per_tree_dense"] > 0
    # The guest derives every larger child: the host keeps no histogram between layers,
    # with or without a budget (the budget's own test: tests/hetero/test_memory_budget.py).
    budgeted, unbounded = result["host_hist_peak_mb_budget"], result["host_hist_peak_mb_sparse"]
    assert budgeted == unbounded == 0
    assert result["under_budget"] is True
    assert result["host_additions_budget"] >= sparse  # built from rows where not kept
