"""The homo benchmark's data handling, and one run end to end on tiny horizontal files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import homo
from tests._tiny_data import write_csv


@pytest.fixture
def tiny_homo(tmp_path: Path) -> Path:
    """``tiny_homo_{guest,host,test}.csv`` with ``y`` among the features (as the student
    files), binary labels that need two features."""
    rng = np.random.default_rng(0)
    for name, rows in (("guest", 160), ("host", 140), ("test", 80)):
        X = rng.normal(size=(rows, 3))
        y = (X[:, 0] - X[:, 2] > 0).astype(np.float64)
        write_csv(
            tmp_path / f"tiny_homo_{name}.csv",
            ["id", "x2", "y", "x0", "x1"],
            np.column_stack([np.arange(rows), X[:, 2], y, X[:, 0], X[:, 1]]),
        )
    return tmp_path


def test_features_are_read_by_name_and_validation_rows_are_a_seeded_quarter(
    tiny_homo: Path,
) -> None:
    path = tiny_homo / "tiny_homo_guest.csv"
    X, y = homo._load(path)
    np.testing.assert_array_equal(y, (X[:, 0] - X[:, 2] > 0).astype(np.float64))
    Xa, ya, valid = homo.client_rows(path, 1, validate=True)
    assert valid is not None
    assert valid[1].size == 40
    assert ya.size == 120
    rows = {tuple(r) for r in np.vstack([Xa, valid[0]])}
    assert rows == {tuple(r) for r in X}  # disjoint, and together every row
    again = homo.client_rows(path, 1, validate=True)[2]
    assert again is not None
    np.testing.assert_array_equal(again[0], valid[0])  # the same in every process
    other = homo.client_rows(path, 0, validate=True)[2]
    assert other is not None
    assert not np.array_equal(other[0], valid[0])  # each client its own split
    assert homo.client_rows(path, 1, validate=False)[2] is None


@pytest.mark.slow  # a federation of processes over real TLS, twice
def test_goss_with_validation_runs_and_prints_the_json_contract_last(
    tiny_homo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--dataset", "tiny", "--clients", "2", "--goss", "--eval-metric", "auc"]
    argv += ["--trees", "2", "--depth", "2", "--bins", "8", "--repeat", "1"]
    assert homo.main([*argv, "--data-dir", str(tiny_homo)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["goss"] is True
    assert result["identical_trees"] is True
    assert result["metric"] == "auc"
    assert {"s_per_tree", "s_per_tree_unmasked", "masking_overhead", "auc", "xgboost_auc"} <= set(
        result
    )
    assert result["valid_rows"] == 40 + 35
    assert result["valid_auc_abs_diff"] == pytest.approx(
        abs(result["valid_auc_federated"] - result["valid_auc_plaintext"]), abs=2e-6
    )
    assert result["valid_auc_abs_diff"] <= 1e-3
