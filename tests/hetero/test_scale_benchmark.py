"""``python -m benchmarks scale`` runs end to end on a few rows and reports its memory."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import scale

pytestmark = pytest.mark.slow


def test_scale_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--rows", "3000", "--test-rows", "500", "--features", "4", "--trees", "1"]
    assert scale.main([*argv, "--depth", "2", "--bins", "8", "--workers", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "scale"
    assert result["rows"] == 3000
    for key in ("s_per_tree", "floor_s_per_tree", "peak_rss_mb_total"):
        assert result[key] > 0, key
    # Guest and host processes, each at least a Python interpreter with numpy loaded.
    assert result["peak_rss_mb_total"] > 2 * 20
    assert result["bytes_per_tree"] > 3000 * 128  # the host got every row's ciphertext
    assert list(result["scaling"]) == ["8", "16", "32", "64"]
    for entry in result["scaling"].values():
        assert entry["s_per_tree"] > 0
        assert 0 < entry["efficiency"] <= 1.0


def test_descendants_are_counted() -> None:
    assert scale._descendants_rss_kib(os.getppid()) > 0  # this process is below its parent
