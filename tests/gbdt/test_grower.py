"""The grower's steps can be driven one by one, and histograms can come from feature blocks.

This is the shape of the federated protocol: the guest drives the layer loop and gets some
features' histograms from elsewhere (decrypted host sums). Same sums, same tree.
"""

from __future__ import annotations

import numpy as np

from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import choose_grid, quantize
from p2pboost.gbdt.grower import TreeGrower, partition_rows
from p2pboost.gbdt.histogram import DenseHistogramBuilder, Histogram
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.split import candidate_mask

Data = tuple[np.ndarray, np.ndarray]


class BlockBuilder:
    """Histograms of the guest's and the host's feature blocks, joined in global order."""

    def __init__(self, data: BinnedData, n_guest: int) -> None:
        self.parts = [
            DenseHistogramBuilder(BinnedData(data.codes[:n_guest], data.n_slots)),
            DenseHistogramBuilder(BinnedData(data.codes[n_guest:], data.n_slots)),
        ]

    def build(
        self,
        rows: np.ndarray | None,
        slots: np.ndarray | None,
        n_nodes: int,
        grad: np.ndarray,
        hess: np.ndarray,
    ) -> Histogram:
        return Histogram.concat_features(
            [p.build(rows, slots, n_nodes, grad, hess) for p in self.parts]
        )


Setup = tuple[BinMapper, BinnedData, np.ndarray, np.ndarray, BoostParams, np.ndarray]


def _setup(breast_missing: Data) -> Setup:
    X, y = breast_missing
    mapper = BinMapper(16).fit(X)
    data = mapper.transform(X)
    g = 0.4 - y[:, None]
    h = np.full_like(g, 0.24)
    g, h = quantize(g, choose_grid(g, len(y))), quantize(h, choose_grid(h, len(y)))
    params = BoostParams(max_depth=4, max_bin=16)
    cands = candidate_mask(mapper.n_bins, 16)
    return mapper, data, g, h, params, cands


def test_step_by_step_equals_grow(breast_missing: Data) -> None:
    mapper, data, g, h, params, cands = _setup(breast_missing)
    builder = DenseHistogramBuilder(data)
    whole = TreeGrower(data, builder, params, g, h, None, cands, mapper.thresholds).grow()

    grower = TreeGrower(data, builder, params, g, h, None, cands, mapper.thresholds)
    frontier = grower.root()
    for depth in range(params.max_depth):
        assert frontier.depth == depth
        plan = grower.apply_splits(frontier, grower.find_splits(frontier))
        grower.partition(plan)
        if depth + 1 < params.max_depth:
            frontier = grower.child_histograms(frontier, plan)
    stepped = grower.finish()
    assert stepped.to_dict() == whole.to_dict()
    # Every row's final position is the leaf it is predicted into.
    assert np.array_equal(grower.positions, whole.leaves_binned(data))


def test_feature_blocks_give_the_same_tree(breast_missing: Data) -> None:
    mapper, data, g, h, params, cands = _setup(breast_missing)
    plain = TreeGrower(
        data, DenseHistogramBuilder(data), params, g, h, None, cands, mapper.thresholds
    ).grow()
    blocks = TreeGrower(
        data,
        BlockBuilder(data, 10),
        params,
        g,
        h,
        None,
        cands,
        mapper.thresholds,
    ).grow()
    assert blocks.to_dict() == plain.to_dict()


def test_partition_rows_matches_a_row_by_row_walk() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    X[rng.random(X.shape) < 0.2] = np.nan
    data = BinMapper(8).fit_transform(X)
    positions = rng.integers(0, 3, 300).astype(np.int64)  # rows in nodes 0, 1, 2
    nodes = np.array([0, 2])
    feature, thr, dleft = np.array([1, 2]), np.array([3, 0]), np.array([True, False])
    for left, right in ((np.array([3, 5]), np.array([4, 6])), (np.array([6, 3]), np.array([4, 5]))):
        got = partition_rows(data, positions, nodes, feature, thr, dleft, left, right, 7)
        for i, p in enumerate(positions):
            if p == 1:
                assert got[i] == 1
                continue
            j = 0 if p == 0 else 1
            b = data.codes[feature[j], i]
            goes_left = dleft[j] if b == data.missing_bin else b <= thr[j]
            assert got[i] == (left[j] if goes_left else right[j])


def test_derived_sibling_histograms_equal_direct_ones_in_every_layer(breast_missing: Data) -> None:
    mapper, data, g, h, params, cands = _setup(breast_missing)
    sample = np.sort(np.random.default_rng(0).choice(len(g), 400, replace=False))
    grower = TreeGrower(
        data, DenseHistogramBuilder(data), params, g, h, sample, cands, mapper.thresholds
    )
    frontier = grower.root()
    for _ in range(3):
        plan = grower.apply_splits(frontier, grower.find_splits(frontier))
        grower.partition(plan)
        frontier = grower.child_histograms(frontier, plan)
        direct = grower.node_histograms(frontier.nodes)
        assert np.array_equal(frontier.hist.grad, direct.grad)  # exact, not allclose
        assert np.array_equal(frontier.hist.hess, direct.hess)
        assert np.array_equal(frontier.grad, direct.grad[:, 0].sum(axis=1))
