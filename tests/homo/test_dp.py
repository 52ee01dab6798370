"""Differentially private horizontal training: the server's mechanisms on aggregated sums give
the core's private model, when the core is given the clients' row keys and the same noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.noise import NoiseSource
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests._carried_rows import spy_carried_rows
from tests.homo.conftest import run_homo, same_trees


def _params(mechanism: str) -> BoostParams:
    dp = {"epsilon": 4.0, "noise_seed": 11, "mechanism": mechanism, "trees_per_ensemble": 3}
    return BoostParams().with_updates(n_estimators=5, max_depth=3, max_bin=16, dp=dp)


@pytest.mark.parametrize("mechanism", ["dpboost", "seq", "para"])
async def test_private_homo_model_equals_the_cores_at_a_fixed_noise_seed(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    mechanism: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    params = _params(mechanism)
    parts = {"c1": breast[0], "c2": breast[1]}
    carried = spy_carried_rows(monkeypatch)
    run = await run_homo(parts, HomoConfig(params=params, round_timeout=20), federation)
    by_clients = sum(carried)
    carried.clear()
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    # Each client keys its own rows from its own stream; the core is given the same keys.
    streams = {c: NoiseSource(11, f"rows:{c}") for c in parts}

    def keys(ensemble: int, n_rows: int) -> np.ndarray:
        return np.concatenate([streams[c].uniform(parts[c][1].size) for c in parts])

    core = train(params, X, y, row_keys=keys)
    assert core.privacy is not None
    assert same_trees(run.result.booster, core)
    # Rows the gradient filter left out of a tree were used by a later tree of its ensemble,
    # the same number at the clients as in the core (SEQ offers every row to every tree).
    assert by_clients == sum(carried)
    assert (by_clients > 0) == (mechanism != "seq")
    record = run.result.booster.privacy
    assert record is not None
    assert record["epsilon"] == pytest.approx(core.privacy["epsilon"])
    # Each client counts the rows its own filter left out; together, the core's count. The
    # server knows none of it, and no model (nor its record) carries a count.
    assert run.result.booster.filtered_rows is None
    assert "filtered_rows" not in record
    counted = 0
    for model in run.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, core)
        assert model.privacy == record
        assert model.filtered_rows is not None
        counted += model.filtered_rows
    assert counted == core.filtered_rows
    assert counted > 0
    # Different noise, different trees: the equality above is not a coincidence.
    other = train(params.with_updates(dp={**params.dp.to_dict(), "noise_seed": 12}), X, y)  # type: ignore[union-attr]
    assert not same_trees(other, core)


async def test_a_private_client_checks_its_own_labels_and_weights(
    breast: list[tuple[np.ndarray, np.ndarray]],
) -> None:
    from typing import Any, cast

    from p2pboost.homo.client import client_train

    config = HomoConfig(params=_params("dpboost"))
    X, y = breast[0]
    session = cast(Any, object())  # never touched: the refusals come first
    with pytest.raises(InputError, match="sample_weight"):
        await client_train(
            session, "server", X, y, config, identity=None, me="c1", sample_weight=np.ones(y.size)
        )
    reg = HomoConfig(params=_params("dpboost").with_updates(objective="reg:squarederror"))
    with pytest.raises(InputError, match="label_bound"):
        await client_train(session, "server", X, 3 + y, reg, identity=None, me="c1")


async def test_a_tree_regrown_after_a_dropout_is_charged_in_full(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """c3 dies after the root's split was chosen and sent out: the tree is grown again with
    the survivors, and the abandoned tree's budget counts on top of the requested one."""
    from tests.homo.conftest import crash_at

    X = np.vstack([p[0] for p in breast])
    y = np.concatenate([p[1] for p in breast])
    parts = {f"c{i + 1}": (X[i::3], y[i::3]) for i in range(3)}
    config = HomoConfig(params=_params("dpboost"), round_timeout=20, threshold=2)
    # TREES-phase replies of a client: grid, root, children, children, grid, ...
    run = await run_homo(parts, config, federation, hooks={"c3": crash_at("masked", 4)})
    assert isinstance(run.result, HomoResult), run.result
    assert run.result.dropped
    record = run.result.booster.privacy
    assert record is not None
    per_tree = record["epsilon_per_tree"]  # 5 trees, 3 per ensemble: 2 ensembles of 2.0
    assert per_tree == pytest.approx(2.0)
    assert record["epsilon"] == pytest.approx(4.0 + per_tree)
