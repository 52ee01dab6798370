"""The lossless benchmark runs end to end on a tiny synthetic vertical data set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import lossless
from tests._tiny_data import write_tiny_vertical


@pytest.fixture
def tiny_breast(tmp_path: Path) -> Path:
    return write_tiny_vertical(tmp_path, rows=120, guest=3, host=2, host_label_column=0)


def test_join_keeps_guest_then_host_columns(tiny_breast: Path) -> None:
    split = lossless.load_hetero_split(tiny_breast, "breast")
    assert split.guest_train.shape[1] == 3
    assert split.host_train.shape[1] == 2
    assert split.task is lossless.Task.BINARY
    assert split.y_train.size == 80
    assert split.y_test.size == 40
    # The label is a function of guest x0 and host x0: the join must line rows up.
    X = split.X_train
    assert np.array_equal(split.y_train, (X[:, 0] + X[:, 3] > 0).astype(np.float64))


def test_main_prints_the_json_contract_last(
    tiny_breast: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--dataset",
        "breast",
        "--mode",
        "plain",
        "--trees",
        "3",
        "--depth",
        "2",
        "--data-dir",
        str(tiny_breast),
        "--repeat",
        "1",
    ]
    assert lossless.main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert list(result) == [
        "benchmark",
        "dataset",
        "mode",
        "metric",
        "p2pboost",
        "xgboost",
        "s_per_tree",
        "xgboost_s_per_tree",
    ]
    assert result["benchmark"] == "lossless"
    assert result["metric"] == "auc"
    assert 0.5 < result["p2pboost"] <= 1.0


def test_main_rejects_other_modes(tiny_breast: Path) -> None:
    argv = ["--dataset", "breast", "--mode", "no-such-mode", "--data-dir", str(tiny_breast)]
    assert lossless.main(argv) == 2
