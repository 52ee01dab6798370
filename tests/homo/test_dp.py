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
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
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

    config = HomoConfig(allow_two_clients=True, params=_params("dpboost"))
    X, y = breast[0]
    session = cast(Any, object())  # never touched: the refusals come first
    with pytest.raises(InputError, match="sample_weight"):
        await client_train(
            session, "server", X, y, config, identity=None, me="c1", sample_weight=np.ones(y.size)
        )
    reg = HomoConfig(
        allow_two_clients=True, params=_params("dpboost").with_updates(objective="reg:squarederror")
    )
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
    config = HomoConfig(
        allow_two_clients=True, params=_params("dpboost"), round_timeout=20, threshold=2
    )
    # TREES-phase replies of a client: grid, root, children, children, grid, ...
    run = await run_homo(parts, config, federation, hooks={"c3": crash_at("masked", 4)})
    assert isinstance(run.result, HomoResult), run.result
    assert run.result.dropped
    record = run.result.booster.privacy
    assert record is not None
    per_tree = record["epsilon_per_tree"]  # 5 trees, 3 per ensemble: 2 ensembles of 2.0
    assert per_tree == pytest.approx(2.0)
    assert record["epsilon"] == pytest.approx(4.0 + per_tree)


async def test_a_client_restarted_mid_ensemble_sits_the_rest_of_it_out(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """c1 dies in the second tree of the second ensemble and its process starts again. The
    keys its first process drew for that ensemble are gone, and keys drawn again would let a
    row that the ensemble's first tree used into a later tree. So the new process offers no
    rows until the next ensemble, where it keys its rows again: no row of any client serves
    two released trees of one ensemble."""
    from p2pboost.homo._model import LocalModel
    from tests.homo.conftest import run_restarting

    params = _params("dpboost").with_updates(n_estimators=7)  # ensembles: 0-2, 3-5, 6
    offered: dict[tuple[str, int], np.ndarray] = {}  # (client, tree): its rows, last grown
    real = LocalModel.grid

    def spy(model: LocalModel, it: int, out: int, sample_seed: int = 0) -> np.ndarray:
        vector = real(model, it, out, sample_seed)
        assert model.tree is not None
        assert model.tree.sample is not None
        offered[model.me, len(model.trees)] = model.tree.sample.copy()
        return vector

    monkeypatch.setattr(LocalModel, "grid", spy)
    parts = {"c1": breast[0], "c2": breast[1]}
    config = HomoConfig(allow_two_clients=True, params=params, round_timeout=20)
    # TREES-phase replies of a client: 4 per tree (grid, root, children, children), so its
    # 18th is tree 4's root: it dies after tree 4's rows were keyed.
    run = await run_restarting(parts, config, federation, "c1", 18)
    assert run.result.dropped == {}
    assert sorted(run.result.clients) == ["c1", "c2"]
    for model in run.models.values():
        assert same_trees(model, run.result.booster)
    assert len(offered) == 2 * 7
    for c in parts:
        for ensemble in ([0, 1, 2], [3, 4, 5], [6]):
            rows = np.concatenate([offered[c, t] for t in ensemble])
            assert np.unique(rows).size == rows.size, (c, ensemble)  # no row serves two trees
    sat_out = {("c1", 4), ("c1", 5)}  # tree 4 regrown without c1's rows, and tree 5
    for key, rows in offered.items():
        assert (rows.size == 0) == (key in sat_out), key  # c1 keyed its rows again at tree 6


async def test_a_private_server_neither_resumes_nor_continues_a_model(tmp_path: Path) -> None:
    """The other restart: a server started again would redraw what its first run spent (the
    ensembles' rows, the noise), so a private run refuses ``resume`` and ``init_model``."""
    from p2pboost.homo.server import server_train

    config = HomoConfig(allow_two_clients=True, params=_params("dpboost"))
    with pytest.raises(InputError, match="cannot continue a model"):
        await server_train({}, config, checkpoint=tmp_path, resume=True)
    X = np.random.default_rng(0).normal(size=(40, 3))
    warm = train(BoostParams(n_estimators=1), X, (X[:, 0] > 0).astype(float))
    with pytest.raises(InputError, match="cannot continue a model"):
        await server_train({}, config, init_model=warm)
