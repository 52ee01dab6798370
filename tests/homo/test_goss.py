"""GOSS in horizontal training: each client ranks and samples its own rows by the core's rule,
and the core given the union of those draws grows the same trees."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo._sampling import client_goss, round_seed, union_draws
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import bundled, run_homo, same_trees

Parts = dict[str, tuple[np.ndarray, np.ndarray]]


def _clients(name: str, n: int) -> Parts:
    """The bundled training rows of ``name``, split into ``n`` clients' disjoint blocks."""
    parts, _ = bundled(name)
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    blocks = np.array_split(np.arange(y.size), n)
    return {f"c{i + 1}": (X[b], y[b]) for i, b in enumerate(blocks)}


def _union(parts: Parts) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([p[0] for p in parts.values()]), np.concatenate([p[1] for p in parts.values()])


GOSS = BoostParams(goss=True, top_rate=0.3, other_rate=0.2, max_depth=3, max_bin=16)


@pytest.mark.parametrize(
    ("data", "n_clients", "params"),
    [
        ("breast", 2, GOSS.with_updates(n_estimators=3, seed=2)),
        ("breast", 3, GOSS.with_updates(n_estimators=3, colsample_bytree=0.8, seed=7)),
        ("wine", 3, GOSS.with_updates(objective="multi:softmax", num_class=3, n_estimators=2)),
        (
            "wine",
            2,
            GOSS.with_updates(
                objective="multi:softmax",
                num_class=3,
                n_estimators=2,
                multi_strategy="multi_output_tree",
            ),
        ),
    ],
    ids=["binary-2", "binary-3-columns", "softmax-3", "softmax-vector-leaves-2"],
)
async def test_goss_at_each_client_gives_the_cores_trees_given_the_same_draws(
    data: str, n_clients: int, params: BoostParams, federation: Path
) -> None:
    parts = _clients(data, n_clients)
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X, y = _union(parts)
    draws = union_draws(params, [(c, p[1].size) for c, p in parts.items()])
    assert draws.row_sample is None
    assert draws.goss_sample is not None
    core = train(params, X, y, goss_sample=draws.goss_sample)
    assert same_trees(run.result.booster, core)
    for model in run.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, core)
    # GOSS mattered: every row, or the core's own ranking of the union, gives other trees.
    assert not same_trees(core, train(params.with_updates(goss=False), X, y))
    assert not same_trees(core, train(params, X, y))
    # The server learns how many rows the clients sampled (the grid's row count), per tree.
    sampled = sum(
        client_goss(1, c, np.zeros((p[1].size, 1)), params.top_rate, params.other_rate)[0].size
        for c, p in parts.items()
    )
    grids = [
        obj["total"][-1] for kind, tag, obj in run.received if (kind, tag) == ("aggregate", "grid")
    ]
    assert grids == [sampled] * len(core.trees)


async def test_a_warm_start_with_goss_is_one_go_too(federation: Path) -> None:
    """The round seeds are functions of the round and the clients rank their rows at the
    margins of the model so far: 2 + 2 rounds are the 4 of one run."""
    params = GOSS.with_updates(n_estimators=2, seed=3)
    parts = _clients("breast", 2)
    config = HomoConfig(allow_two_clients=True, params=params, round_timeout=20)
    first = await run_homo(parts, config, federation)
    assert isinstance(first.result, HomoResult), first.result
    more = await run_homo(parts, config, federation, init_model=first.result.booster)
    assert isinstance(more.result, HomoResult), more.result
    X, y = _union(parts)
    longer = params.with_updates(n_estimators=4)
    draws = union_draws(longer, [(c, p[1].size) for c, p in parts.items()])
    core = train(longer, X, y, goss_sample=draws.goss_sample)
    assert same_trees(more.result.booster, core)


def test_goss_is_accepted_and_goss_with_subsample_refused_as_in_the_core() -> None:
    HomoConfig(params=BoostParams(goss=True)).validate()
    with pytest.raises(InputError, match="either GOSS or subsample"):
        HomoConfig(params=BoostParams(goss=True, subsample=0.5)).validate()
    # A round seed for every round of a GOSS run (0 means: no row sampling).
    params = BoostParams(goss=True, seed=4)
    seeds = [round_seed(params, r) for r in range(5)]
    assert all(s > 0 for s in seeds)
    assert len(set(seeds)) == 5
    assert round_seed(BoostParams(seed=4), 0) == 0


def test_the_union_draws_must_fit_the_cores_rows() -> None:
    params = BoostParams(goss=True, top_rate=0.3, other_rate=0.2)
    draws = union_draws(params, [("c1", 10), ("c2", 5)])
    assert draws.goss_sample is not None
    rows, scale = draws.goss_sample(0, np.linspace(-1.0, 1.0, 15)[:, None])
    assert np.all(rows[:-1] < rows[1:])
    assert scale.shape == (15,)
    assert (rows < 10).sum() == 3 + 2  # each client's own shares of its rows
    assert (rows >= 10).sum() == 2 + 1
    with pytest.raises(InputError, match="the core has 16 rows, the clients 15"):
        draws.goss_sample(0, np.zeros((16, 1)))


async def test_l1_with_goss_refits_its_leaves_on_the_sampled_rows_as_the_core(
    federation: Path,
) -> None:
    """Medians (L1's leaf refit) are searched over each tree's GOSS rows, as the core refits
    over its sample: the trees are the core's given the same draws."""
    parts = _clients("diabetes", 2)
    params = GOSS.with_updates(objective="reg:absoluteerror", n_estimators=3, seed=4)
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X, y = _union(parts)
    draws = union_draws(params, [(c, p[1].size) for c, p in parts.items()])
    core = train(params, X, y, goss_sample=draws.goss_sample)
    assert same_trees(run.result.booster, core)
    assert not same_trees(core, train(params.with_updates(goss=False), X, y))
