"""Monotone and interaction constraints in vertical training: the core's constrained trees on
the joined data, in every mode, with each host declaring its own features' constraints."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any, cast

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams, DPParams
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero._messages import Hello
from p2pboost.hetero.config import VERSION
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.constraints import guest_constraints, host_declaration
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.hetero.training.modes import FeatureSchedule
from p2pboost.testing import TRAINING, LocalFederation, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees

NAMES = [f"f{i}" for i in range(30)]
BLOCKS = (slice(0, 10), slice(10, 20), slice(20, 30))
#: Two guest and two host features (one per host), the directions of their correlation with
#: the label in the breast-cancer data (all negative: larger cells, less often benign).
GUEST_MONO = {"f0": -1, "f2": -1}
HOST_MONO = [{"f13": -1}, {"f22": -1}]
JOINED_MONO = {**GUEST_MONO, **HOST_MONO[0], **HOST_MONO[1]}
#: Groups spanning the three parties.
GROUPS = (("f0", "f1", "f13", "f22"), ("f2", "f10", "f11"), ("f20", "f21", "f3"))


async def _federate(
    c: LocalFederation,
    X: np.ndarray,
    y: np.ndarray,
    params: BoostParams,
    pool: Executor,
    keys: Keys,
    host_settings: Sequence[dict[str, Any]],
    config: Any = CONFIG,
) -> tuple[GuestModel, list[HostModel]]:
    hosts = ["b", "c"]

    async def guest() -> GuestModel:
        async with c["a"].session("train", peers=hosts) as s:
            return await guest_train(
                s,
                hosts,
                X[:, BLOCKS[0]],
                y,
                params,
                config=config,
                executor=pool,
                keys=keys,
                feature_names=NAMES[BLOCKS[0]],
            )

    async def host(h: str, block: slice, settings: dict[str, Any]) -> HostModel:
        async with c[h].session("train", peers=["a"]) as s:
            return await host_train(
                s,
                "a",
                X[:, block],
                executor=pool,
                workers=2,
                feature_names=NAMES[block],
                **settings,
            )

    out = await asyncio.gather(
        guest(),
        *(host(h, b, st) for h, b, st in zip(hosts, BLOCKS[1:], host_settings, strict=True)),
    )
    return cast(GuestModel, out[0]), cast(list[HostModel], list(out[1:]))


def _monotone_violations(trees: list[Tree], X: np.ndarray, directions: dict[str, int]) -> int:
    """Rows whose margin moves against a direction when that feature alone grows."""
    rng = np.random.default_rng(1)
    rows = X[rng.integers(0, X.shape[0], 200)]
    bad = 0
    for name, d in directions.items():
        f = NAMES.index(name)
        grid = np.nanquantile(X[:, f], np.linspace(0, 1, 12))
        margins = []
        for v in grid:
            Z = rows.copy()
            Z[:, f] = v
            margins.append(sum(t.predict_raw(Z)[:, 0] for t in trees))
        steps = np.diff(np.stack(margins, axis=1), axis=1) * d
        bad += int((steps < -1e-12).any(axis=1).sum())
    return bad


def _paths_mix(trees: list[Tree], groups: Sequence[Sequence[str]]) -> int:
    """Paths whose features are in no single group (a single feature is always allowed)."""
    sets = [{NAMES.index(n) for n in g} for g in groups]
    bad = 0

    def walk(t: Tree, node: int, used: frozenset[int]) -> None:
        nonlocal bad
        if t.feature[node] < 0:
            if len(used) > 1 and not any(used <= s for s in sets):
                bad += 1
            return
        now = used | {int(t.feature[node])}
        walk(t, int(t.left[node]), now)
        walk(t, int(t.right[node]), now)

    for t in trees:
        walk(t, 0, frozenset())
    return bad


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        {},
        {"complete_secure": 1},
        {"tree_num_per_party": 1},
        {"host_depth": 2, "guest_depth": 2},
    ],
    ids=["plain", "complete_secure", "mix", "layered"],
)
async def test_monotone_equals_the_core_in_every_mode(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, mode: dict[str, Any]
) -> None:
    X, y = breast
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16, learning_rate=0.5)
    config = replace(CONFIG, **mode)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        guest, hosts = await _federate(
            c,
            X,
            y,
            replace(params, monotone_constraints=GUEST_MONO),
            pool,
            keys,
            [{"monotone_constraints": m} for m in HOST_MONO],
            config,
        )
    trees = joined_trees(guest, hosts)
    joined = replace(params, monotone_constraints=JOINED_MONO)
    schedule = FeatureSchedule(
        (10, 10, 10),
        config.complete_secure,
        config.tree_num_per_party,
        config.host_depth,
        config.guest_depth,
    )
    core = train(
        joined,
        X,
        y,
        feature_names=NAMES,
        features_by_round=schedule.by_round(),
        features_by_depth=schedule.by_depth(),
    )
    assert_same_trees(trees, core)
    owners = {int(o) for t in guest.trees for o in t.owner}
    assert owners >= {0}
    assert owners & {1, 2}
    assert _monotone_violations(trees, X, JOINED_MONO) == 0
    if not mode:  # without the directions the model breaks them (the check can fail)
        free = train(params, X, y, feature_names=NAMES)
        assert _monotone_violations(free.trees, X, JOINED_MONO) > 0


@pytest.mark.slow
async def test_interactions_across_parties_equal_the_core(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16, learning_rate=0.5)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        guest, hosts = await _federate(
            c,
            X,
            y,
            replace(params, interaction_constraints=GROUPS, monotone_constraints=GUEST_MONO),
            pool,
            keys,
            [
                {"interaction_constraints": GROUPS, "monotone_constraints": HOST_MONO[0]},
                {"interaction_constraints": GROUPS},
            ],
        )
    trees = joined_trees(guest, hosts)
    joined = replace(
        params,
        interaction_constraints=GROUPS,
        monotone_constraints={**GUEST_MONO, **HOST_MONO[0]},
    )
    assert_same_trees(trees, train(joined, X, y, feature_names=NAMES))
    assert _paths_mix(trees, GROUPS) == 0
    assert any(t.depth >= 3 for t in trees)
    # Without the groups the same trees mix features across them (the test can fail).
    free = train(replace(params, monotone_constraints=JOINED_MONO), X, y, feature_names=NAMES)
    assert _paths_mix(free.trees, GROUPS) > 0


def _hello(n: int, **kw: Any) -> Hello:
    return Hello(VERSION, 10, n, [], **kw)


def test_host_declaration_is_by_token_and_names_nothing() -> None:
    d = host_declaration({"x2": 1, "x0": -1}, [["x0", "x1", "g0"], ["g1"]], ["x0", "x1", "x2"], 3)
    assert sorted(d.token.tolist()) == [0, 1, 2]
    assert d.directions is not None
    assert d.directions[d.token[0]] == -1
    assert d.directions[d.token[2]] == 1
    assert d.directions[d.token[1]] == 0
    assert [g.tolist() for g in d.groups][1] == [0, 0, 0]
    assert d.groups[0][d.token[0]] == 1
    assert d.groups[0][d.token[1]] == 1
    assert d.groups[0].sum() == 2
    with pytest.raises(InputError, match="unknown feature"):
        host_declaration({"nope": 1}, None, ["x0"], 1)
    with pytest.raises(InputError, match="must be -1, 0 or 1"):
        host_declaration({"x0": 2}, None, ["x0"], 1)
    with pytest.raises(InputError, match="gives a position"):
        host_declaration(None, [[0, 1]], ["x0", "x1"], 2)


def test_the_guest_checks_what_hosts_declare() -> None:
    params = BoostParams(interaction_constraints=(("a", "h"),))
    ok = guest_constraints(
        params, ["a"], 1, ["b"], [_hello(2, groups=[np.array([0, 1], np.uint8)])]
    )
    assert ok is not None
    assert ok.tokens == [True]
    assert ok.features.groups is not None
    assert ok.features.groups.tolist() == [[True, False, True]]
    with pytest.raises(InputError, match="names 2 features but the parties hold 1"):
        guest_constraints(params, ["a"], 1, ["b"], [_hello(2)])
    two = [np.array([0, 1], np.uint8)] * 2
    with pytest.raises(InputError, match="declares 2 interaction groups"):
        guest_constraints(params, ["a"], 1, ["b"], [_hello(2, groups=two)])
    with pytest.raises(InputError, match="the guest's params have none"):
        guest_constraints(
            BoostParams(), ["a"], 1, ["b"], [_hello(2, groups=[np.array([0, 1], np.uint8)])]
        )
    mono = guest_constraints(
        BoostParams(),
        ["a"],
        1,
        ["b", "c"],
        [_hello(2, directions=np.array([0, 1], np.int8)), _hello(1)],
    )
    assert mono is not None
    assert mono.tokens == [True, False]
    assert mono.features.monotone is not None
    assert mono.features.monotone.tolist() == [0, 0, 1, 0]
    assert guest_constraints(BoostParams(), ["a"], 1, ["b"], [_hello(2)]) is None
    vector = BoostParams(objective="multi:softmax", num_class=3, multi_strategy="multi_output_tree")
    with pytest.raises(InputError, match="host\\(s\\) 'b' declare monotone_constraints"):
        guest_constraints(
            vector, ["a"], 1, ["b"], [_hello(2, directions=np.array([1, 0], np.int8))]
        )
    dp = BoostParams(interaction_constraints=(("a",),), dp=DPParams(epsilon=1.0))
    with pytest.raises(InputError, match="with dp does not apply"):
        guest_constraints(dp, ["a"], 1, ["b"], [_hello(2)])


def test_a_hello_with_bad_declarations_is_refused() -> None:
    assert _hello(2, directions=np.array([0, 2], np.int8)).check() is not None
    assert _hello(2, directions=np.array([0], np.int8)).check() is not None
    assert _hello(2, groups=[np.array([0, 1, 1], np.uint8)]).check() is not None
    assert _hello(2, groups=[np.array([0, 3], np.uint8)]).check() is not None
    assert _hello(2, directions=np.array([-1, 1], np.int8)).check() is None


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"monotone_constraints": {"f13": 1}}, "unknown feature"),
        ({"monotone_constraints": (1, 0)}, "has 2 directions"),
        ({"interaction_constraints": ((0, 1),)}, "gives a position"),
        (
            {
                "interaction_constraints": (("f0", "f13"),),
                "dp": DPParams(epsilon=1.0),
                "n_estimators": 2,
            },
            "with dp does not apply",
        ),
    ],
)
async def test_the_guest_refuses_bad_settings_before_contacting_a_host(
    breast: tuple[np.ndarray, np.ndarray], settings: dict[str, Any], match: str
) -> None:
    X, y = breast
    params = BoostParams(**settings)
    with pytest.raises(InputError, match=match):
        await guest_train(
            cast(Any, object()),
            ["b"],
            np.nan_to_num(X[:, BLOCKS[0]]),
            y,
            params,
            config=CONFIG,
            feature_names=NAMES[BLOCKS[0]],
        )


@pytest.mark.slow
async def test_interactions_with_multi_output_trees_equal_the_core(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    params = BoostParams(
        objective="multi:softmax",
        num_class=2,
        multi_strategy="multi_output_tree",
        n_estimators=2,
        max_depth=3,
        max_bin=8,
        interaction_constraints=GROUPS,
    )
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        guest, hosts = await _federate(
            c, X, y, params, pool, keys, [{"interaction_constraints": GROUPS}] * 2
        )
    trees = joined_trees(guest, hosts)
    assert trees[0].value.shape[1] == 2
    assert_same_trees(trees, train(params, X, y, feature_names=NAMES))
    assert _paths_mix(trees, GROUPS) == 0
