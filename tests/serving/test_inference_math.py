"""The pure inference arithmetic: flat forest == the model's own tree walk, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.exceptions import InputError
from p2pboost.hetero.inference.forest import (
    FlatForest,
    HostSplits,
    host_bits,
    pack_bits,
    padding_is_clear,
    unpack_bits,
)
from tests.serving.conftest import HOST_COLS, Trained


def test_host_bits_equal_the_models_decisions(trained: Trained) -> None:
    for name in trained.guest.hosts:
        model = trained.host(name)
        X = trained.X[:, HOST_COLS[name]]
        splits = HostSplits.of(model)
        ref = model.decisions(X)
        order = np.lexsort((ref.node, ref.tree))
        np.testing.assert_array_equal(splits.tree, ref.tree[order])
        np.testing.assert_array_equal(splits.node, ref.node[order])
        np.testing.assert_array_equal(host_bits(splits, X), ref.go_left[order])


def test_flat_forest_equals_predict_margin_exactly(trained: Trained) -> None:
    forest = FlatForest(trained.guest)
    bits = [
        host_bits(HostSplits.of(trained.host(h)), trained.X[:, HOST_COLS[h]])
        for h in trained.guest.hosts
    ]
    ours = forest.margin(trained.guest_X(), bits)
    assert np.array_equal(ours, trained.reference_margin())  # exact, not approximate
    one = forest.margin(trained.guest_X(slice(7, 8)), [b[:, 7:8] for b in bits])
    assert np.array_equal(one, trained.reference_margin(slice(7, 8)))


def test_flat_forest_checks_shapes(trained: Trained) -> None:
    forest = FlatForest(trained.guest)
    with pytest.raises(InputError, match="guest features"):
        forest.margin(np.zeros((3, 4)), [])
    with pytest.raises(InputError, match="bits from 2 hosts"):
        forest.margin(trained.guest_X(slice(0, 3)), [])


def test_zero_rounds_gives_the_base_margin(trained: Trained) -> None:
    forest = FlatForest(trained.guest, n_rounds=0)
    bits = [np.zeros((nodes.size, 2), bool) for nodes in forest.host_nodes]
    assert all(nodes.size == 0 for nodes in forest.host_nodes)  # no tree: no host bits
    out = forest.margin(trained.guest_X(slice(0, 2)), bits)
    np.testing.assert_array_equal(out, np.tile(trained.guest.base_margin, (2, 1)))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 6), st.integers(0, 40), st.randoms(use_true_random=False))
def test_pack_unpack_round_trip(n_splits: int, n_rows: int, rnd: object) -> None:
    rng = np.random.default_rng(n_splits * 100 + n_rows)
    bits = rng.random((n_splits, n_rows)) < 0.5
    packed = pack_bits(bits)
    assert packed.size == n_splits * ((n_rows + 7) // 8)
    assert padding_is_clear(packed, n_splits, n_rows)
    np.testing.assert_array_equal(unpack_bits(packed, n_splits, n_rows), bits)
    if n_splits and n_rows % 8:
        dirty = packed.copy()
        dirty[-1] |= 1  # the last padding bit
        assert not padding_is_clear(dirty, n_splits, n_rows)


def test_large_batches_take_the_per_feature_path_and_stay_exact(trained: Trained) -> None:
    from p2pboost.hetero.inference.forest import GROUPED_ROWS

    rows = np.resize(np.arange(trained.ids.size), GROUPED_ROWS + 37)  # NaNs included
    forest = FlatForest(trained.guest)
    bits = [
        host_bits(HostSplits.of(trained.host(h)), trained.X[rows][:, HOST_COLS[h]])
        for h in trained.guest.hosts
    ]
    assert np.isnan(trained.guest_X(rows)).any()
    assert np.array_equal(
        forest.margin(trained.guest_X(rows), bits), trained.reference_margin(rows)
    )
