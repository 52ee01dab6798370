"""``python -m benchmarks credit`` runs end to end on a tiny vertical data set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import credit
from tests._tiny_data import write_tiny_vertical


def test_unknown_sections_are_refused() -> None:
    with pytest.raises(SystemExit) as excinfo:
        credit.main(["--sections", "shap,bogus"])
    assert excinfo.value.code == 2


@pytest.mark.slow
def test_shap_iv_and_psi_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tiny_vertical(tmp_path, rows=300, guest=2, host=3, host_label_column=2)
    argv = ["--dataset", "breast", "--sections", "shap,iv,psi", "--trees", "2", "--depth", "3"]
    assert credit.main([*argv, "--bins", "8", "--data-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["benchmark"] == "credit"
    assert "monotone" not in result
    shap = result["shap"]
    assert shap["max_abs_additivity_error"] < 1e-9
    assert shap["max_abs_diff_vs_core"] < 1e-9
    assert shap["max_rel_diff_core_vs_xgboost"] < 1e-5
    assert result["iv"]["counts_equal"] is True
    assert result["iv"]["max_abs_diff_vs_plaintext"] == 0.0
    assert result["psi"]["max_abs_diff_vs_plaintext"] == 0.0
    assert result["psi"]["shifted_flagged"] is True
