"""``python -m benchmarks modes`` runs every mode end to end (separate processes, mTLS) and
checks each against the core's same-mode model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import modes

pytestmark = pytest.mark.slow


def test_every_mode_end_to_end(tiny_vertical: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--dataset", "breast", "--key-bits", "1024", "--trees", "2", "--depth", "3"]
    argv += ["--host-depth", "1", "--bins", "8", "--workers", "1", "--hosts", "2"]
    assert modes.main([*argv, "--data-dir", str(tiny_vertical)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "modes"
    for mode in ("std", "mix", "layered", "complete_secure"):
        run = result[mode]
        assert run["identical_to_core"] is True, mode
        assert run["s_per_tree"] > 0
        assert 0.0 <= run["auc"] <= 1.0
    # The guest-only trees of mix mode move fewer bytes than the standard protocol's.
    assert result["mix"]["bytes_per_tree"] < result["std"]["bytes_per_tree"]
    assert result["mix_over_std"] > 0


def test_tree_kinds_on_a_multi_class_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A multi-class set compares one tree per class with multi-output trees, both timed end
    to end and both equal to the core; the multi-output run stops at the round where the
    core's multi-output model reaches the per-class accuracy."""
    from tests._tiny_data import write_csv

    rng = np.random.default_rng(1)
    n = 180
    g, h = rng.normal(size=(n, 2)), rng.normal(size=(n, 3))
    score = g[:, 0] + h[:, 0] - h[:, 1]
    y = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3])).astype(float)
    ids = np.arange(n, dtype=float)
    write_csv(tmp_path / "synth_mc11_hetero_guest.csv", ["id", "y", "x0", "x1"], np.c_[ids, y, g])
    write_csv(tmp_path / "synth_mc11_hetero_host.csv", ["id", "x0", "x1", "x2"], np.c_[ids, h])
    argv = ["--dataset", "synth_mc11", "--objective", "multi:softmax", "--key-bits", "1024"]
    argv += ["--trees", "3", "--depth", "2", "--bins", "8", "--workers", "1"]
    assert modes.main([*argv, "--data-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["classes"] == 3
    pc, mo = result["per_class"], result["multi_output"]
    assert (pc["rounds"], pc["trees"]) == (3, 9)
    assert 1 <= mo["rounds"] == mo["trees"] <= 3
    assert pc["identical_to_core"] is True
    assert mo["identical_to_core"] is True
    if mo["rounds"] < 3:  # stopped early: it reached the per-class accuracy
        assert mo["accuracy"] >= pc["accuracy"]
    assert result["multi_output_over_per_class"] > 0
    xgb = result["xgboost_accuracy"]  # XGBoost's two strategies, measured beside
    assert 0 < xgb["per_class"] <= 1
    assert 0 < xgb["multi_output"] <= 1
    reach = xgb["multi_output_rounds_to_reach_per_class"]
    assert reach is None or 1 <= reach <= 12
    with pytest.raises(SystemExit):  # a multi-class set is not a binary task
        modes.main(
            [
                "--dataset",
                "synth_mc11",
                "--objective",
                "binary:logistic",
                "--data-dir",
                str(tmp_path),
            ]
        )
