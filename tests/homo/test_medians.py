"""Objectives built on medians in horizontal training: L1's leaf refit and the labels' median
as base margin, found by a search over securely summed counts, give the core's model on the
union of the rows, tree for tree and bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import RemoteProtocolError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo._messages import Masked
from p2pboost.homo._sampling import client_sample, round_seed
from p2pboost.homo.client import Client
from p2pboost.homo.config import HomoConfig, HomoPhase, HomoResult
from tests.homo.conftest import Crash, bundled, crash_at, hello, run_homo, same_trees

Parts = dict[str, tuple[np.ndarray, np.ndarray]]


def _diabetes(n_clients: int) -> Parts:
    """scikit-learn's diabetes (integer labels: many ties) cut into ``n_clients`` parts of
    random, uneven sizes."""
    two, _ = bundled("diabetes")
    X = np.vstack([p[0] for p in two.values()])
    y = np.concatenate([p[1] for p in two.values()])
    cuts = np.sort(
        np.random.default_rng(n_clients).choice(np.arange(20, y.size - 20), n_clients - 1)
    )
    return {
        f"c{i + 1}": (Xc, yc)
        for i, (Xc, yc) in enumerate(zip(np.split(X, cuts), np.split(y, cuts), strict=True))
    }


def _union(parts: Parts) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([p[0] for p in parts.values()]), np.concatenate([p[1] for p in parts.values()])


def _bitwise(a: Booster, b: Booster) -> bool:
    """Every leaf value and the base margin equal bit for bit (``same_trees`` compares values,
    which would let ``-0.0`` pass for ``0.0``)."""
    if a.base_margin.view(np.uint64).tolist() != b.base_margin.view(np.uint64).tolist():
        return False
    return all(
        np.array_equal(ta.value.view(np.uint64), tb.value.view(np.uint64))
        for ta, tb in zip(a.trees, b.trees, strict=True)
    )


async def _trained(parts: Parts, params: BoostParams, federation: Path, **options: Any) -> Booster:
    """The federation's model; every client's must be the server's."""
    run = await run_homo(
        parts,
        HomoConfig(allow_two_clients=True, params=params, round_timeout=20),
        federation,
        **options,
    )
    assert isinstance(run.result, HomoResult), run.result
    for model in run.models.values():
        assert isinstance(model, Booster), model
        assert same_trees(model, run.result.booster)
        assert _bitwise(model, run.result.booster)
    return run.result.booster


@pytest.mark.parametrize("n_clients", [2, 3])
async def test_l1_equals_the_core_on_the_union(n_clients: int, federation: Path) -> None:
    parts = _diabetes(n_clients)
    params = BoostParams(objective="reg:absoluteerror", n_estimators=3, max_depth=3, seed=1)
    model = await _trained(parts, params, federation)
    core = train(params, *_union(parts))
    assert model.base_margin[0] == np.median(_union(parts)[1])  # no base_score needed
    assert same_trees(model, core)
    assert _bitwise(model, core)
    # The refit mattered: the leaves are not the Newton step's.
    newton = train(params.with_updates(objective="reg:squarederror"), *_union(parts))
    assert not np.array_equal(model.trees[0].value, newton.trees[0].value)


async def test_l1_with_row_sampling_and_weights_equals_the_core_given_the_draws(
    federation: Path,
) -> None:
    """Each tree's leaves are the medians over its sampled rows only; weights scale the
    gradients (so the splits) and, as in the core, not the medians."""
    parts = _diabetes(2)
    params = BoostParams(
        objective="reg:absoluteerror", n_estimators=3, max_depth=3, subsample=0.6, seed=2
    )
    rng = np.random.default_rng(5)
    weights = {c: rng.uniform(0.5, 2.0, p[1].size) for c, p in parts.items()}

    def draws(round_: int, n_rows: int) -> np.ndarray:
        rows, offset = [], 0
        for c, (_, yc) in parts.items():
            sample = client_sample(round_seed(params, round_), c, yc.size, params.subsample)
            assert sample is not None
            rows.append(sample + offset)
            offset += yc.size
        return np.concatenate(rows)

    model = await _trained(parts, params, federation, weights=weights)
    w = np.concatenate([weights[c] for c in parts])
    core = train(params, *_union(parts), sample_weight=w, row_sample=draws)
    assert same_trees(model, core)
    assert _bitwise(model, core)
    assert not same_trees(core, train(params, *_union(parts), row_sample=draws))


@pytest.mark.parametrize(
    "params",
    [
        BoostParams(objective="reg:pseudohubererror", huber_delta=20.0),
        BoostParams(objective="reg:fair", fair_c=10.0),
        BoostParams(objective="reg:logcosh"),
    ],
    ids=["pseudo-huber", "fair", "log-cosh"],
)
async def test_median_start_without_base_score_equals_the_core(
    params: BoostParams, federation: Path
) -> None:
    parts = _diabetes(2)
    params = params.with_updates(n_estimators=2, max_depth=3)
    model = await _trained(parts, params, federation)
    core = train(params, *_union(parts))
    assert same_trees(model, core)
    assert _bitwise(model, core)


def _median(
    r: int, of: str, depth: int, width: int, group: list[int], prefix: list[int], tree: Any = None
) -> dict[str, Any]:
    return {
        "t": "median",
        "round": r,
        "of": of,
        "depth": depth,
        "width": width,
        "group": np.array(group, dtype=np.int64),
        "prefix": np.array(prefix, dtype=np.uint64),
        "tree": tree,
    }


def test_a_client_answers_only_a_narrowing_median_search() -> None:
    """Over its labels before the model header, over a tree's residuals by that tree's leaves
    after it; each step bounded and following the previous one."""
    params = BoostParams(objective="l1", max_depth=2, n_estimators=1, max_bin=4)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 2)), rng.integers(0, 5, 12).astype(np.float64)
    config = HomoConfig(allow_two_clients=True, params=params, masking=False)
    client = Client("c1", "server", X, y, config, identity=None)
    client.handle(hello(config))
    first = client.handle(_median(1, "labels", 0, 8, [0], [0]))
    assert isinstance(first, Masked)
    counts = first.z.view(np.int64)
    assert counts.sum() == 12  # every label, by its key's top 8 bits
    top = int(np.flatnonzero(counts)[0])
    assert isinstance(client.handle(_median(2, "labels", 8, 16, [0], [top])), Masked)
    core = train(params, X, y)
    shape = core.trees[0].to_dict()
    refused = [
        (_median(3, "labels", 8, 8, [0], [top]), "does not follow"),
        (_median(3, "labels", 24, 8, [0, 0, 0], [1, 2, 3]), "more than two prefixes"),
        (_median(3, "labels", 24, 8, [0], [(top + 1) << 16]), "extends none"),
        (_median(3, "labels", 0, 8, [1], [0]), "one group's"),
        (_median(3, "residuals", 0, 8, [0], [0], shape), "before the model header"),
        (_median(3, "residuals", 0, 8, [0], [0]), "a tree comes with the first step"),
        (_median(3, "labels", 0, 8, [0], [0], shape), "a tree comes with the first step"),
        (_median(3, "ranks", 0, 8, [0], [0]), "a median of 'ranks'"),
        (_median(3, "labels", 8, 8, [0], [256]), "longer than 8 bits"),
    ]
    for msg, why in refused:
        with pytest.raises(RemoteProtocolError, match=why) as err:
            client.handle(msg)
        assert err.value.peer == "server"
    edges = [e.tolist() for e in core.mapper.edges]
    client.handle({"t": "model", "edges": [np.array(e) for e in edges], "base": [2.0]})
    with pytest.raises(RemoteProtocolError, match="one group's, before the model header"):
        client.handle(_median(4, "labels", 0, 8, [0], [0]))
    with pytest.raises(RemoteProtocolError, match="before the tree's gradients"):
        client.handle(_median(4, "residuals", 0, 8, [0], [0], shape))
    assert isinstance(
        client.handle({"t": "grid", "round": 5, "it": 0, "output": 0, "sample_seed": 0}), Masked
    )
    n_nodes = core.trees[0].n_nodes
    with pytest.raises(RemoteProtocolError, match=f"the tree has {n_nodes} nodes"):
        client.handle(_median(6, "residuals", 0, 8, [n_nodes], [0], shape))
    with pytest.raises(RemoteProtocolError, match="bad tree"):
        client.handle(_median(6, "residuals", 0, 8, [0], [0], {"value": [[0.0]]}))
    nodes = list(range(n_nodes))
    reply = client.handle(_median(6, "residuals", 0, 8, nodes, [0] * n_nodes, shape))
    assert isinstance(reply, Masked)
    per_node = reply.z.view(np.int64).reshape(n_nodes, 256).sum(axis=1)
    leaves = core.trees[0].leaves_binned(core.mapper.transform(X))
    np.testing.assert_array_equal(per_node, np.bincount(leaves, minlength=n_nodes))


async def test_a_client_lost_during_a_median_search_regrows_the_tree(federation: Path) -> None:
    """c3 sends its first counts of the first tree's median search, then dies: the tree is
    grown again by the survivors, from the bins and base margin of all three: the core's
    trees on the survivors' rows from those bins and that base margin."""
    parts = _diabetes(3)
    params = BoostParams(objective="reg:absoluteerror", n_estimators=2, max_depth=3, seed=1)
    config = HomoConfig(allow_two_clients=True, params=params, round_timeout=5)
    # grid, root, two layers of children, then the search: c3 dies before its 6th vector.
    hooks = {"c3": crash_at("masked", 6, HomoPhase.TREES)}
    run = await run_homo(parts, config, federation, hooks=hooks)
    assert isinstance(run.result, HomoResult), run.result
    assert run.result.clients == ["c1", "c2"]
    assert isinstance(run.models["c3"], Crash)
    tags = [
        (obj["round"], agg_tag, obj["contributors"])
        for kind, agg_tag, obj in run.received
        if kind == "aggregate"
    ]
    last_with_c3 = max(i for i, (_, _, who) in enumerate(tags) if "c3" in who)
    # It died in the middle of a search; the round it missed completes without it, then the
    # tree starts again.
    assert [t[1] for t in tags[last_with_c3 : last_with_c3 + 3]] == ["median", "median", "grid"]
    fed = run.result.booster
    start = Booster(params, fed.mapper, fed.base_margin, [], [], 1)
    survivors = {c: parts[c] for c in ("c1", "c2")}
    core = train(params, *_union(survivors), init_model=start)
    assert same_trees(fed, core)
    assert _bitwise(fed, core)
    for c in survivors:
        model = run.models[c]
        assert isinstance(model, Booster), model
        assert same_trees(model, fed)
