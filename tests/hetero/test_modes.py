"""SecureBoost+ modes: mix (parties take turns) and layered (host layers on top, guest layers
below), each equal to the core's trees under the same feature schedule on the joined data."""

from __future__ import annotations

import itertools
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero._messages import Layer, TreeStart
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.training import host_tree as _host
from p2pboost.hetero.training.modes import FeatureSchedule
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees, federate, predict

BLOCKS = (8, 10, 12)  # guest, host b, host c: breast cancer's 30 columns


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, object]]:
    """Every message each host's protocol takes in, with its session (one per host), in
    order."""
    received: list[tuple[int, object]] = []
    real_recv = _host.recv  # type: ignore[attr-defined]

    async def recording_recv(channel: Any, expected: Any) -> Any:
        msg = await real_recv(channel, expected)
        received.append((id(channel.session), msg))
        return msg

    monkeypatch.setattr(_host, "recv", recording_recv)
    return received


def _blocks(X: np.ndarray) -> list[np.ndarray]:
    edges = np.cumsum((0, *BLOCKS))
    return [X[:, a:b] for a, b in itertools.pairwise(edges.tolist())]


@pytest.mark.slow
async def test_mix_mode_parties_take_turns_and_equal_the_core(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast  # with missing values
    params = BoostParams(n_estimators=6, max_depth=3, max_bin=16)
    config = replace(CONFIG, tree_num_per_party=1)
    blocks = _blocks(X)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, blocks[0], y, blocks[1:], params, pool, keys, config=config)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    schedule = FeatureSchedule(BLOCKS, tree_num_per_party=1)
    core = train(params, X, y, features_by_round=schedule.by_round())
    assert_same_trees(fed.joined(), core)
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    # Rounds 0, 3: the guest's; 1, 4: host b's; 2, 5: host c's (each tree one party's).
    for t, party in enumerate([0, 1, 2, 0, 1, 2]):
        tree = fed.guest.trees[t]
        assert set(tree.owner[tree.left >= 0].tolist()) == {party}, t
    assert {s.tree for s in fed.hosts[0].splits} <= {1, 4}
    assert {s.tree for s in fed.hosts[1].splits} <= {2, 5}


@pytest.mark.slow
async def test_layered_mode_hosts_split_the_top_and_leave_the_tree(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = breast
    received = _record(monkeypatch)
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16)
    config = replace(CONFIG, host_depth=2, guest_depth=2)
    blocks = _blocks(X)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, blocks[0], y, blocks[1:], params, pool, keys, config=config)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    schedule = FeatureSchedule(BLOCKS, host_depth=2, guest_depth=2)
    core = train(params, X, y, features_by_depth=schedule.by_depth())
    assert_same_trees(fed.joined(), core)
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    for tree in fed.guest.trees:
        depth = np.zeros(tree.n_nodes, dtype=np.int64)
        for node in range(tree.n_nodes):
            if tree.left[node] >= 0:
                depth[tree.left[node]] = depth[tree.right[node]] = depth[node] + 1
        internal = tree.left >= 0
        assert (tree.owner[internal & (depth < 2)] >= 1).all()  # host layers: hosts' splits
        assert (tree.owner[internal & (depth >= 2)] == 0).all()  # guest layers: the guest's
    # Each host takes in at most the two host layers of every tree, the last of them telling
    # it to leave the tree: nothing of the guest's layers reaches it.
    sessions = {s for s, _ in received}
    assert len(sessions) == 2
    for session in sessions:
        per_tree: list[list[Layer]] = []
        for s, m in received:
            if s == session and isinstance(m, TreeStart):
                per_tree.append([])
            elif s == session and isinstance(m, Layer):
                per_tree[-1].append(m)
        assert len(per_tree) == params.n_estimators
        for layers in per_tree:
            assert 1 <= len(layers) <= 2
            assert not layers[-1].grow


async def test_mode_settings_are_checked() -> None:
    with pytest.raises(InputError, match="both host_depth and guest_depth"):
        HeteroConfig(host_depth=2)
    with pytest.raises(InputError, match="not both"):
        HeteroConfig(host_depth=2, guest_depth=1, tree_num_per_party=1)
    with pytest.raises(InputError, match="tree_num_per_party must be an integer >= 0"):
        HeteroConfig(tree_num_per_party=-1)


async def test_layered_mode_needs_max_depth_to_match(
    breast: tuple[np.ndarray, np.ndarray], keys: Keys
) -> None:
    from typing import cast

    from p2pboost.hetero.training.guest import guest_train

    X, y = breast
    config = HeteroConfig(host_depth=2, guest_depth=2, key_bits=1024, allow_insecure_key=True)
    with pytest.raises(InputError, match="max_depth must be 4, not 6"):
        await guest_train(cast(Any, object()), ["b"], X, y, BoostParams(), config=config)


@pytest.mark.slow
async def test_a_guest_with_labels_only_equals_the_core_on_the_hosts_features(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    from p2pboost.hetero.model import GuestModel

    X, y = breast
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16)
    hosts = [X[:, :12], X[:, 12:]]
    label_only = np.empty((y.size, 0))
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, label_only, y, hosts, params, pool, keys)
        margin = await predict(c, fed, label_only, hosts)
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    back = GuestModel.from_dict(fed.guest.to_dict())
    assert back.mapper.n_features == 0
    assert len(back.trees) == 3


async def test_a_label_only_guest_refuses_the_modes_that_need_its_features(
    breast: tuple[np.ndarray, np.ndarray],
) -> None:
    from typing import cast

    from p2pboost.hetero.training.guest import guest_train

    _, y = breast
    for config in (
        HeteroConfig(complete_secure=1),
        HeteroConfig(tree_num_per_party=1),
        HeteroConfig(host_depth=1, guest_depth=2),
    ):
        params = BoostParams(max_depth=3)
        with pytest.raises(InputError, match="needs the guest's features"):
            await guest_train(cast(Any, object()), ["b"], None, y, params, config=config)


@pytest.mark.slow
async def test_level_and_node_column_draws_reach_the_hosts_and_equal_the_core(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    params = BoostParams(
        n_estimators=3,
        max_depth=3,
        max_bin=16,
        colsample_bytree=0.8,
        colsample_bylevel=0.6,
        colsample_bynode=0.5,
    )
    blocks = _blocks(X)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, blocks[0], y, blocks[1:], params, pool, keys)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    assert not np.array_equal(
        train(params.with_updates(colsample_bynode=1.0), X, y).predict_margin(X), margin
    )
