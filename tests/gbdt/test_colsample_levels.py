"""colsample_bylevel and colsample_bynode: per depth and per node column draws."""

from __future__ import annotations

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.sampling import sample_from
from p2pboost.gbdt.tree import Tree


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, 10))
    y = (X @ rng.normal(size=10) > 0).astype(float)
    return X, y


def _depths(tree: Tree) -> np.ndarray:
    depth = np.zeros(tree.n_nodes, dtype=np.int64)
    for node in range(tree.n_nodes):
        if tree.left[node] >= 0:
            depth[tree.left[node]] = depth[tree.right[node]] = depth[node] + 1
    return depth


def test_sample_from_draws_a_share_of_the_mask() -> None:
    mask = np.zeros(20, dtype=np.bool_)
    mask[[1, 4, 6, 9]] = True
    out = sample_from(np.random.default_rng(0), mask, 0.5)
    assert out.sum() == 2
    assert not (out & ~mask).any()
    assert sample_from(np.random.default_rng(0), mask, 1.0) is mask
    assert sample_from(np.random.default_rng(0), mask, 0.01).sum() == 1  # at least one


def test_one_feature_per_level_and_per_node() -> None:
    X, y = _data()
    per_level = train(BoostParams(n_estimators=5, max_depth=3, colsample_bylevel=0.1), X, y)
    for tree in per_level.trees:
        depth, internal = _depths(tree), tree.left >= 0
        for d in range(3):
            assert len(set(tree.feature[internal & (depth == d)].tolist())) <= 1
    per_node = train(BoostParams(n_estimators=5, max_depth=3, colsample_bynode=0.1), X, y)
    mixed = any(
        len(set(t.feature[(t.left >= 0) & (_depths(t) == 2)].tolist())) > 1 for t in per_node.trees
    )
    assert mixed  # nodes of a depth draw their own feature


def test_draws_follow_the_seed() -> None:
    X, y = _data()
    params = BoostParams(n_estimators=4, max_depth=3, colsample_bylevel=0.5, colsample_bynode=0.5)
    a, b = train(params, X, y), train(params, X, y)
    assert [t.feature.tolist() for t in a.trees] == [t.feature.tolist() for t in b.trees]
    other = train(params.with_updates(seed=1), X, y)
    assert [t.feature.tolist() for t in a.trees] != [t.feature.tolist() for t in other.trees]
    full = train(BoostParams(n_estimators=4, max_depth=3), X, y)
    assert [t.feature.tolist() for t in a.trees] != [t.feature.tolist() for t in full.trees]


def test_range_checked_and_refused_where_not_supported() -> None:
    with pytest.raises(InputError, match="colsample_bynode"):
        BoostParams(colsample_bynode=0.0).validate()
    with pytest.raises(InputError, match="colsample_bylevel and colsample_bynode at 1 with dp"):
        BoostParams().with_updates(colsample_bylevel=0.5, dp={"epsilon": 1.0})
