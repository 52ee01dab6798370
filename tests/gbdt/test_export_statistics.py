"""Exports leave the per-node statistics out unless the owner asks for them.

Covers (``sum_hessian``) and gains with split values let a reader reconstruct training records
(TimberStrike, arXiv 2506.07605); predictions need neither. So the XGBoost export writes zeros
in their place and says so in the file (``learner.attributes``) and on the command line, and
``with_statistics=True`` / ``--with-statistics`` writes them (TreeSHAP on the export needs
them); the owner's own model file keeps them either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from p2pboost.app.cli import main
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.export import STATISTICS_ATTRIBUTE, to_xgboost
from p2pboost.gbdt.params import BoostParams

Data = tuple[np.ndarray, np.ndarray]


def _trees(model: dict[str, object]) -> list[dict[str, list[float]]]:
    return model["learner"]["gradient_booster"]["model"]["trees"]  # type: ignore[index]


def _load(model: dict[str, object], tmp_path: Path, name: str) -> xgb.Booster:
    path = tmp_path / name
    path.write_text(json.dumps(model))
    booster = xgb.Booster()
    booster.load_model(str(path))
    return booster


def test_statistics_are_left_out_unless_asked_and_predictions_do_not_change(
    breast: Data, tmp_path: Path
) -> None:
    X, y = breast
    model = train(BoostParams(n_estimators=4, max_depth=3), X, y)
    bare, full = to_xgboost(model), to_xgboost(model, with_statistics=True)
    for tree in _trees(bare):
        assert not any(tree["sum_hessian"])
        assert not any(tree["loss_changes"])
    assert "left out" in bare["learner"]["attributes"][STATISTICS_ATTRIBUTE]
    assert full["learner"]["attributes"][STATISTICS_ATTRIBUTE] == "included"
    for tree, ours in zip(_trees(full), model.trees, strict=True):
        np.testing.assert_array_equal(tree["sum_hessian"], ours.cover.astype(np.float32))
        assert any(tree["loss_changes"])
    data = xgb.DMatrix(X)
    b, f = _load(bare, tmp_path, "bare.json"), _load(full, tmp_path, "full.json")
    np.testing.assert_array_equal(b.predict(data), f.predict(data))
    np.testing.assert_allclose(f.predict(data), model.predict(X), rtol=1e-6, atol=1e-6)
    # TreeSHAP on the export weighs the paths by the covers: only the full export gives it
    contribs = f.predict(data, pred_contribs=True)
    np.testing.assert_allclose(contribs.sum(axis=1), f.predict(data, output_margin=True), atol=1e-4)
    assert not np.allclose(b.predict(data, pred_contribs=True), contribs, equal_nan=True)
    assert model.trees[0].cover.any()  # the owner's model keeps them


def test_export_command_says_what_it_left_out(
    breast: Data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    X, y = breast
    train(BoostParams(n_estimators=2, max_depth=2), X, y).save(tmp_path / "model.json")
    before = (tmp_path / "model.json").read_bytes()
    out = tmp_path / "x.json"
    assert main(["export", str(tmp_path / "model.json"), "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert "--with-statistics" in said.err
    assert not any(_trees(json.loads(out.read_text()))[0]["sum_hessian"])
    argv = ["export", str(tmp_path / "model.json"), "--with-statistics", "--out", str(out)]
    assert main(argv) == 0
    assert "--with-statistics" not in capsys.readouterr().err
    saved = Booster.load(tmp_path / "model.json")
    exported = _trees(json.loads(out.read_text()))[0]["sum_hessian"]
    np.testing.assert_array_equal(exported, saved.trees[0].cover.astype(np.float32))
    assert (tmp_path / "model.json").read_bytes() == before
