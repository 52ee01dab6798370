"""The dp benchmark runs end to end on a tiny vertical data set and prints its contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import dp
from tests._tiny_data import write_tiny_vertical


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
    assert 0.5 < result["nonprivate"] <= 1.0
    assert result["filtered_rows"] >= 0
