"""``python -m benchmarks lossless --mode hetero`` runs end to end on a tiny vertical data set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import lossless
from tests._tiny_data import write_tiny_vertical

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


def test_hetero_mode_reports_identical_trees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tiny_vertical(tmp_path, rows=150, guest=2, host=4, host_label_column=3)
    argv = ["--dataset", "breast", "--mode", "hetero", "--hosts", "2", "--key-bits", "1024"]
    argv += ["--trees", "2", "--depth", "3", "--bins", "8", "--workers", "1"]
    assert lossless.main([*argv, "--data-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["mode"] == "hetero"
    assert result["identical_trees"] is True
    assert result["max_abs_pred_diff"] == 0.0
    assert result["p2pboost"] == result["plaintext"]
    assert result["hosts"] == 2
    assert result["key_bits"] == 1024
    assert result["s_per_tree"] > 0
    assert result["floor_s_per_tree"] > 0
