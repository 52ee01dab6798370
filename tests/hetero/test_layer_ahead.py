"""A layer sent ahead of its owner's answer (protocol version 10), seen on the wire.

Where no other host owns a split of the layer, the guest sends the layer right behind its
``decide``, leaving out the left sets the host decides (``decided``); where two hosts own
splits of one layer, each gets the whole layer after every answer. Either way the trees are
the core's, and what a host can rebuild of the trees' row sets from what it received and
answered is every row set the tree has.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pytest

from p2pboost.audit.views import TapFabric, decoded, host_partitions
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.params import BoostParams
from p2pboost.testing import TRAINING, local_federation
from tests.hetero.conftest import Keys, assert_same_trees, federate

#: Whole federations: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


def _layers_after_decide(messages: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each ``decide`` a host received with the ``layer`` that followed it."""
    out, question = [], None
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        if msg.get("t") == "decide":
            question = msg
        elif msg.get("t") == "layer" and question is not None:
            out.append((question, msg))
            question = None
    return out


async def _trained(
    X: np.ndarray, y: np.ndarray, cuts: list[int], params: BoostParams, pool: Executor, keys: Keys
) -> tuple[TapFabric, Booster]:
    """Guest ``a`` with the columns before ``cuts[0]``, hosts ``b`` (and ``c``) the blocks
    after, over a recording fabric; the trees checked against the core's."""
    hosts = ["b", "c"][: len(cuts) - 1]
    blocks = [X[:, a:b] for a, b in itertools.pairwise(cuts)]
    fabric = TapFabric()
    async with local_federation(fabric, ["a", *hosts], TRAINING) as c:
        fed = await federate(c, X[:, : cuts[0]], y, blocks, params, pool, keys)
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    return fabric, core


async def test_one_host_gets_the_layer_before_it_answers(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    params = BoostParams(n_estimators=2, max_depth=4, max_bin=16)
    fabric, core = await _trained(X, y, [10, 30], params, pool, keys)
    received = decoded(fabric, "b")
    pairs = _layers_after_decide(received)
    assert pairs, "the host won no split: nothing was decided"
    for question, layer in pairs:
        # Ahead of the answer: exactly the nodes asked are left out, their bitmaps empty.
        assert sorted(np.asarray(layer["decided"]).tolist()) == sorted(
            np.asarray(question["nodes"]).tolist()
        )
        nodes = np.asarray(layer["nodes"]).tolist()
        for node, bitmap in zip(nodes, layer["bitmaps"], strict=True):
            assert (np.asarray(bitmap).size == 0) == (node in question["nodes"])
    # The host's view (what it received and what it answered) holds every row set: its last
    # positions are the trees' leaves for every row; without its answers it has none of them.
    view = host_partitions(received, X.shape[0], decoded(fabric, "a", sender="b"))
    assert len(view.leaves) == params.n_estimators
    for tree, leaves in zip(core.trees, view.leaves, strict=True):
        np.testing.assert_array_equal(leaves, tree.leaves_raw(X))
    with pytest.raises(ValueError, match="the host's own answer"):
        host_partitions(received, X.shape[0])


async def test_two_hosts_with_splits_in_one_layer_wait_for_every_answer(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16)
    fabric, _ = await _trained(X, y, [10, 20, 30], params, pool, keys)
    late = ahead = 0
    for host in ("b", "c"):
        for _, layer in _layers_after_decide(decoded(fabric, host)):
            if np.asarray(layer["decided"]).size:
                ahead += 1
            else:  # another host owned a split of the layer: every left set is here
                assert all(np.asarray(b).size for b in layer["bitmaps"])
                late += 1
    assert late > 0
    assert ahead > 0
