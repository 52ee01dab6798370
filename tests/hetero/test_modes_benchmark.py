"""``python -m benchmarks modes`` runs every mode end to end (separate processes, mTLS) and
checks each against the core's same-mode model."""

from __future__ import annotations

import json
from pathlib import Path

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
