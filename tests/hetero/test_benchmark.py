"""``python -m benchmarks lossless --mode hetero`` runs end to end on a tiny vertical data set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import lossless

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


def _write(path: Path, header: list[str], rows: np.ndarray) -> None:
    lines = [",".join(header)] + [",".join(f"{v:.6f}" for v in row) for row in rows]
    path.write_text("\n".join(lines))


def test_hetero_mode_reports_identical_trees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    n = 150
    ids = rng.permutation(n).astype(np.float64)
    guest, host = rng.normal(size=(n, 2)), rng.normal(size=(n, 4))
    y = (guest[:, 0] + host[:, 0] - host[:, 3] > 0).astype(np.float64)
    _write(
        tmp_path / "breast_hetero_guest.csv",
        ["id", "y", "g0", "g1"],
        np.column_stack([ids, y, guest]),
    )
    order = rng.permutation(n)
    _write(
        tmp_path / "breast_hetero_host.csv",
        ["id", "h0", "h1", "h2", "h3"],
        np.column_stack([ids, host])[order],
    )
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
