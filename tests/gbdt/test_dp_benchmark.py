"""The dp benchmark runs end to end on a tiny vertical data set and prints its contract."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import dp
from tests._tiny_data import write_csv, write_tiny_vertical


def test_dp_benchmark_prints_every_mechanism_at_every_epsilon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tiny_vertical(tmp_path, rows=300, guest=3, host=2, host_label_column=0)
    argv = ["--dataset", "breast", "--trees", "4", "--depth", "2", "--epsilons", "1,50"]
    assert dp.main([*argv, "--seeds", "2", "--data-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "dp"
    assert result["metric"] == "auc"
    assert result["higher_is_better"] is True
    assert result["epsilons"] == [1.0, 50.0]
    for mech in ("dpboost", "seq", "para"):
        assert len(result[mech]) == 2
        assert all(0.0 <= v <= 1.0 for v in result[mech])
    for mech in ("dpboost", "seq", "para"):
        for median, (lo, hi) in zip(result[mech], result["ci95"][mech], strict=True):
            assert lo <= median <= hi
    for base in ("seq", "para"):  # AUC: positive margin = DPBoost's median is the higher
        expected = [d - b for d, b in zip(result["dpboost"], result[base], strict=True)]
        assert result["margin"][base] == pytest.approx(expected, abs=2e-6)
        for margin, (lo, hi) in zip(
            result["margin"][base], result["margin_ci95"][base], strict=True
        ):
            assert lo <= margin <= hi
    assert 0.5 < result["nonprivate"] <= 1.0
    assert result["filtered_rows"] > 0  # counted by training (model files do not hold it)


def test_dp_benchmark_margins_favour_the_lower_rmse_on_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(1)
    rows = 200
    g, h = rng.normal(size=(rows, 2)), rng.normal(size=(rows, 2))
    grade = np.clip(np.round(10 + 3 * g[:, 0] + 3 * h[:, 0]), 0, 20)  # "student": range 0..20
    ids = np.arange(rows, dtype=np.float64)
    write_csv(
        tmp_path / "student_hetero_guest.csv",
        ["id", "y", "x0", "x1"],
        np.column_stack([ids, grade, g]),
    )
    write_csv(tmp_path / "student_hetero_host.csv", ["id", "x0", "x1"], np.column_stack([ids, h]))
    argv = ["--dataset", "student", "--trees", "3", "--depth", "2", "--epsilons", "2"]
    assert dp.main([*argv, "--seeds", "2", "--data-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["metric"] == "rmse"
    assert result["higher_is_better"] is False
    for base in ("seq", "para"):  # RMSE: positive margin = DPBoost's median is the lower
        assert result["margin"][base][0] == pytest.approx(
            result[base][0] - result["dpboost"][0], abs=2e-6
        )
