"""``p2pboost report`` on horizontal models: the server's and every client's model file keep
the aggregated validation history, and the report draws its learning curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.cli import main
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import bundled, run_homo
from tests.test_report import assert_plot


async def test_a_homo_model_with_history_gets_a_learning_curve(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, test = bundled("breast")
    parts = {"c1": breast[0], "c2": breast[1]}
    evals = {"c1": (test[0][::2], test[1][::2]), "c2": (test[0][1::2], test[1][1::2])}
    params = BoostParams(n_estimators=4, max_depth=3, max_bin=16)
    config = HomoConfig(allow_two_clients=True, params=params, round_timeout=20, eval_metric="auc")
    run = await run_homo(parts, config, federation, eval_sets=evals)
    assert isinstance(run.result, HomoResult), run.result
    client = run.models["c1"]
    assert isinstance(client, Booster), client
    for name, model in (("server", run.result.booster), ("client", client)):
        assert len(model.history["valid"]["auc"]) == 4
        model.save(tmp_path / f"{name}.json")
        assert main(["report", str(tmp_path / f"{name}.json"), "--out", str(tmp_path)]) == 0
        written = [Path(line) for line in capsys.readouterr().out.splitlines()]
        assert [p.name for p in written] == [f"{name}_importance.png", f"{name}_learning_curve.png"]
        for path in written:
            assert_plot(path)
