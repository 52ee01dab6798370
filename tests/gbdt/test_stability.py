"""PSI: the formula by hand, and the bands on a shifted and an unshifted batch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.stability import (
    EPSILON,
    band,
    feature_counts,
    psi,
    score_counts,
    score_edges,
)


def test_psi_equals_a_hand_computation() -> None:
    expected = [10, 20, 30, 40]
    actual = [20, 20, 20, 40]
    by_hand = (
        (0.2 - 0.1) * math.log(0.2 / 0.1)
        + (0.2 - 0.2) * math.log(1.0)
        + (0.2 - 0.3) * math.log(0.2 / 0.3)
        + (0.4 - 0.4) * math.log(1.0)
    )
    assert float(psi(expected, actual)) == pytest.approx(by_hand, rel=1e-14)
    # An empty bin in the new batch: its proportion there is EPSILON; empty in both adds 0.
    empty = (EPSILON - 0.5) * math.log(EPSILON / 0.5) + (1.0 - 0.5) * math.log(1.0 / 0.5)
    assert float(psi([5, 5, 0], [0, 8, 0])) == pytest.approx(empty, rel=1e-14)
    # One PSI per feature for (features, bins) counts; zero for identical proportions.
    per_feature = psi([[10, 20, 30, 40], [1, 2, 3, 4]], [[20, 20, 20, 40], [2, 4, 6, 8]])
    np.testing.assert_allclose(per_feature, [by_hand, 0.0], rtol=1e-14, atol=1e-15)


def test_bands() -> None:
    assert [band(v) for v in (0.0, 0.099, 0.1, 0.25, 0.2501)] == [
        "stable",
        "stable",
        "watch",
        "watch",
        "shift",
    ]


def test_a_feature_shifted_by_one_standard_deviation_is_flagged() -> None:
    rng = np.random.default_rng(0)
    train = rng.normal(size=(5000, 3))
    train[rng.random(5000) < 0.05, 2] = np.nan
    mapper = BinMapper(16).fit(train)
    same = rng.normal(size=(5000, 3))
    same[rng.random(5000) < 0.05, 2] = np.nan
    shifted = same.copy()
    shifted[:, 1] += 1.0  # one standard deviation
    base = feature_counts(mapper, train)
    assert base.shape == (3, 17)
    assert base[2, -1] > 0  # missing values in their own bin
    stable = psi(base, feature_counts(mapper, same))
    moved = psi(base, feature_counts(mapper, shifted))
    assert np.all(stable < 0.1)
    assert moved[1] > 0.25
    np.testing.assert_array_equal(moved[[0, 2]], stable[[0, 2]])
    # Scores: deciles of the training scores.
    weights = np.array([0.3, 1.0, 0.0])
    score = np.nan_to_num(train) @ weights
    edges = score_edges(score)
    assert edges.size == 9
    expected = score_counts(score, edges)
    assert expected.sum() == 5000
    assert np.all(np.abs(expected - 500) <= 1)
    assert float(psi(expected, score_counts(np.nan_to_num(same) @ weights, edges))) < 0.1
    assert float(psi(expected, score_counts(np.nan_to_num(shifted) @ weights, edges))) > 0.25


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(InputError, match="same shape"):
        psi([1, 2], [1, 2, 3])
    with pytest.raises(InputError, match="non-negative"):
        psi([1, -2], [1, 2])
    with pytest.raises(InputError, match="at least one row"):
        psi([0, 0], [1, 2])
    with pytest.raises(InputError, match="finite"):
        score_edges([1.0, np.nan])
    with pytest.raises(InputError, match="increasing"):
        score_counts([1.0], [2.0, 1.0])
