from __future__ import annotations

import numpy as np
import pytest

from p2pboost.exceptions import ModelError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree

Data = tuple[np.ndarray, np.ndarray]


def test_raw_and_binned_prediction_agree_leaf_by_leaf(breast_missing: Data) -> None:
    X, y = breast_missing
    booster = train(BoostParams(n_estimators=3, max_depth=5, max_bin=8), X, y)
    data = booster.mapper.transform(X)
    for tree in booster.trees:
        assert np.array_equal(tree.leaves_raw(X), tree.leaves_binned(data))
        assert np.all(tree.is_leaf[tree.leaves_raw(X)])


def test_tree_arrays_are_consistent(breast: Data) -> None:
    X, y = breast
    tree = train(BoostParams(n_estimators=1, max_depth=4), X, y).trees[0]
    internal = tree.feature >= 0
    assert tree.depth == 4
    assert np.all(tree.left[internal] + 1 == tree.right[internal])
    assert np.all(tree.gain[internal] > 0)
    # A parent's hessian sum is its children's.
    kids = tree.cover[tree.left[internal]] + tree.cover[tree.right[internal]]
    assert np.allclose(kids, tree.cover[internal])
    assert Tree.from_dict(tree.to_dict()).to_dict() == tree.to_dict()


def test_invalid_tree_dicts_raise(breast: Data) -> None:
    X, y = breast
    doc = train(BoostParams(n_estimators=1, max_depth=2), X, y).trees[0].to_dict()
    with pytest.raises(ModelError):
        Tree.from_dict({**doc, "left": doc["left"][:-1]})
    with pytest.raises(ModelError):
        Tree.from_dict({**doc, "right": [0] * len(doc["right"])})
    with pytest.raises(ModelError):
        Tree.from_dict({k: v for k, v in doc.items() if k != "value"})
