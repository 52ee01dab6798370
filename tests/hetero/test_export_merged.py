"""A vertical model exported whole, with every host's consent (its model part): xgboost and
ONNX Runtime predict what the federation predicts."""

from __future__ import annotations

import json
from concurrent.futures import Executor
from pathlib import Path

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]
import pytest
import xgboost as xgb

from p2pboost.app.cli import main
from p2pboost.exceptions import ModelError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import merged_model
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Keys, federate, predict

pytestmark = pytest.mark.slow


async def test_merged_vertical_model_exports_and_predicts_as_the_federation(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    X, y = breast  # with missing values
    params = BoostParams(n_estimators=4, max_depth=3, max_bin=16)
    blocks = [X[:, :8], X[:, 8:18], X[:, 18:]]
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, blocks[0], y, blocks[1:], params, pool, keys)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    merged = merged_model(fed.guest, fed.hosts)
    core = train(params, X, y)
    np.testing.assert_array_equal(merged.predict_margin(X), margin)
    np.testing.assert_array_equal(merged.predict_margin_binned(merged.mapper.transform(X)), margin)
    np.testing.assert_array_equal(merged.predict(X), core.predict(X))
    with pytest.raises(ModelError, match="has no split"):
        merged_model(fed.guest, fed.hosts[::-1])  # parts in the wrong order

    fed.guest.save(tmp_path / "guest.json")
    for k, host in enumerate(fed.hosts, start=1):
        host.save(tmp_path / f"host{k}.json")
    parts = [a for k in (1, 2) for a in ("--host-part", str(tmp_path / f"host{k}.json"))]
    guest = str(tmp_path / "guest.json")
    onnx_file = tmp_path / "m.onnx"
    assert main(["export", guest, *parts, "--format", "onnx", "--out", str(onnx_file)]) == 0
    session = ort.InferenceSession(onnx_file.read_bytes(), providers=["CPUExecutionProvider"])
    onnx_p = session.run(None, {"X": X})[0][:, 0]
    federated = np.asarray(fed.guest.transform(margin)).reshape(-1)
    np.testing.assert_allclose(onnx_p, federated, rtol=1e-12, atol=1e-12)
    assert main(["export", guest, *parts, "--out", str(tmp_path / "m.json")]) == 0
    booster = xgb.Booster()
    booster.load_model(str(tmp_path / "m.json"))
    names = json.loads((tmp_path / "m.json").read_text())["learner"]["feature_names"] or None
    xgb_p = booster.predict(xgb.DMatrix(X, feature_names=names))
    np.testing.assert_allclose(xgb_p, onnx_p, rtol=1e-6, atol=1e-6)
    # the merged export leaves the nodes' covers and gains out unless asked (--with-statistics)
    trees = json.loads((tmp_path / "m.json").read_text())["learner"]["gradient_booster"]
    for tree in trees["model"]["trees"]:
        assert not any(tree["sum_hessian"])
        assert not any(tree["loss_changes"])
    assert (
        main(["export", guest, *parts, "--with-statistics", "--out", str(tmp_path / "s.json")]) == 0
    )
    full = json.loads((tmp_path / "s.json").read_text())["learner"]["gradient_booster"]
    assert all(any(t["sum_hessian"]) for t in full["model"]["trees"])


def test_export_refuses_one_party_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from p2pboost.hetero.model import GuestModel, HostModel  # noqa: F401  (file formats)

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    train(BoostParams(n_estimators=1), X, (X[:, 0] > 0).astype(float)).save(tmp_path / "b.json")
    part = ["--host-part", str(tmp_path / "b.json")]
    assert main(["export", str(tmp_path / "b.json"), *part, "--out", str(tmp_path / "x")]) == 1
    assert "--host-part goes with a vertical guest's model file" in capsys.readouterr().err
