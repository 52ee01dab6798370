"""``python -m benchmarks inference`` runs end to end on a tiny vertical data set.

Parties are separate processes over WebSocket + mTLS, as in the real run; two hosts, so the
one-message-per-host-per-batch figure is checked for more than one host.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks import inference

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

KEYS = {
    "benchmark",
    "dataset",
    "trees",
    "depth",
    "hosts",
    "clients",
    "rows_per_s",
    "rounds_per_batch",
    "p50_ms",
    "p99_ms",
    "requests_per_s",
    "max_abs_diff",
}


def _write(path: Path, header: list[str], ids: np.ndarray, X: np.ndarray) -> None:
    lines = [",".join(header)]
    lines += [f"{i}," + ",".join(f"{v:.6f}" for v in row) for i, row in zip(ids, X, strict=True)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def tiny_vertical(tmp_path: Path) -> Path:
    """240 rows; the label needs guest and host features; host rows in another order."""
    rng = np.random.default_rng(0)
    n = 240
    ids = rng.permutation(np.arange(5000, 5000 + n))
    guest, host = rng.normal(size=(n, 3)), rng.normal(size=(n, 4))
    y = (guest[:, 0] + host[:, 0] - host[:, 3] > 0).astype(np.float64)
    _write(
        tmp_path / "breast_hetero_guest.csv",
        ["id", "y", "x0", "x1", "x2"],
        ids,
        np.column_stack([y, guest]),
    )
    order = rng.permutation(n)
    _write(
        tmp_path / "breast_hetero_host.csv", ["id", "x0", "x1", "x2", "x3"], ids[order], host[order]
    )
    return tmp_path


def test_join_puts_host_rows_in_the_guests_order(tiny_vertical: Path) -> None:
    data = inference.load_vertical(tiny_vertical, "breast")
    assert data.guest_columns == ["x0", "x1", "x2"]
    assert data.host_columns == ["x0", "x1", "x2", "x3"]
    X = data.X
    assert X.shape == (240, 7)
    assert np.array_equal(data.y, (X[:, 0] + X[:, 3] - X[:, 6] > 0).astype(np.float64))


def test_trains_then_serves_from_the_files(
    tiny_vertical: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / "models"
    common = ["--dataset", "breast", "--data-dir", str(tiny_vertical), "--repeats", "2"]
    common += ["--clients", "8", "--requests", "4", "--warmup", "1", "--sequential", "5"]
    argv = [*common, "--hosts", "2", "--trees", "2", "--depth", "2", "--bins", "8"]
    assert inference.main([*argv, "--workers", "1", "--save-models", str(models)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert set(result) == KEYS
    assert result["benchmark"] == "inference"
    assert (result["trees"], result["depth"], result["hosts"]) == (2, 2, 2)
    assert result["rounds_per_batch"] == 1  # one message to each host per batch
    assert result["max_abs_diff"] <= 1e-9
    assert any("host1 1, host2 1" in line for line in out)
    assert any(re.search(r"every online score equals its row's batch score +True", s) for s in out)
    for key in ("rows_per_s", "p50_ms", "p99_ms", "requests_per_s"):
        assert result[key] > 0
    assert result["p50_ms"] <= result["p99_ms"]
    assert sorted(p.name for p in models.iterdir()) == ["guest.json", "host1.json", "host2.json"]

    # The saved files serve again in new processes, without training.
    assert inference.main([*common, "--models", str(models)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    again = json.loads(out[-1])
    assert again["hosts"] == 2
    assert again["rounds_per_batch"] == 1
    assert again["max_abs_diff"] <= 1e-9
    assert any(f"loaded from {models}" in line for line in out)
