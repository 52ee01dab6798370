"""The DP mechanisms against their distributions (chi-square at a fixed seed, many draws)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats  # type: ignore[import-untyped]

from p2pboost.gbdt.noise import (
    NoiseSource,
    exponential_mechanism,
    snapped_laplace,
    snapping_epsilon,
)

# A fixed seed keeps the tests repeatable; the thresholds are for a correct sampler to fail
# about once in a million runs, a wrong distribution fails by many orders of magnitude.
P_MIN = 1e-6


def test_seeded_streams_repeat_and_labels_separate_them() -> None:
    a, b = NoiseSource(7), NoiseSource(7)
    assert np.array_equal(a.words(100), b.words(100))
    assert not np.array_equal(NoiseSource(7, "rows").words(100), NoiseSource(7).words(100))
    assert not np.array_equal(NoiseSource(8).words(100), NoiseSource(7).words(100))
    assert NoiseSource(7).seeded
    assert not NoiseSource().seeded


def test_unseeded_streams_differ() -> None:
    assert not np.array_equal(NoiseSource().words(8), NoiseSource().words(8))


def test_uniform_is_open_and_uniform() -> None:
    u = NoiseSource(1).uniform(200_000)
    assert u.min() > 0.0
    assert u.max() < 1.0
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert stats.chisquare(counts).pvalue > P_MIN


def test_uniform_doubles_reach_every_binade_with_its_probability() -> None:
    u = NoiseSource(2).uniform_doubles(400_000)
    assert u.min() > 0.0
    assert u.max() <= 1.0
    # P(u in [2^-k, 2^-(k-1))) = 2^-k: the binade counts of k = 1..12 and the rest.
    k = np.minimum(-np.floor(np.log2(u)).astype(int), 13)
    observed = np.bincount(k, minlength=14)[1:]
    p = np.array([2.0**-j for j in range(1, 13)] + [2.0**-12])
    assert stats.chisquare(observed, p * u.size).pvalue > P_MIN
    # Within a binade the mantissa is uniform (the low bits too, unlike a 2^-53 grid).
    low_bits = (np.frexp(u)[0] * 2**53).astype(np.int64) & 0xFF
    assert stats.chisquare(np.bincount(low_bits, minlength=256)).pvalue > P_MIN


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_snapped_laplace_matches_laplace_on_its_grid(scale: float) -> None:
    """Draws at f = 0 fall on multiples of Lambda (the power of two >= scale) with the
    Laplace probability of the cell around each multiple."""
    n = 300_000
    out = snapped_laplace(np.zeros(n), 1.0, 1.0 / scale, 1000.0, NoiseSource(3))
    lam = 2.0 ** math.ceil(math.log2(scale))
    steps = out / lam
    assert np.array_equal(steps, np.round(steps))  # on the grid
    cells = np.clip(steps.astype(np.int64), -6, 6)
    observed = np.bincount(cells + 6, minlength=13)
    edges = (np.arange(-6, 7) - 0.5) * lam
    cdf = stats.laplace(scale=scale).cdf
    p = np.diff(np.concatenate([[0.0], cdf(edges[1:]), [1.0]]))
    assert stats.chisquare(observed, p * n).pvalue > P_MIN


def test_snapped_laplace_clamps_to_the_values_bound() -> None:
    out = snapped_laplace(np.full(10_000, 0.3), 1.0, 0.01, 0.5, NoiseSource(4))
    assert out.min() >= -0.5
    assert out.max() <= 0.5
    assert snapped_laplace(np.zeros(3), 2.0, 1.0, 1.0, NoiseSource(4)).shape == (3,)
    with pytest.raises(ValueError, match="must be positive"):
        snapped_laplace(np.zeros(1), 0.0, 1.0, 1.0, NoiseSource(4))


def test_snapping_epsilon_is_the_theorem_bound() -> None:
    # B = max(bound, 2 * scale) in units of the sensitivity: here bound wins.
    assert snapping_epsilon(1.0, 1.0, 100.0) == pytest.approx(1.0 * (1 + 2.0**-49 * 100.0))
    assert snapping_epsilon(0.1, 1.0, 1.0) == pytest.approx(0.1 * (1 + 2.0**-49 * 20.0))


def test_exponential_mechanism_selection_frequencies() -> None:
    scores = np.array([0.0, 1.0, 2.0, -np.inf, 0.5, -1.0])
    n = 200_000
    chosen = exponential_mechanism(np.tile(scores, (n, 1)), NoiseSource(5))
    observed = np.bincount(chosen, minlength=scores.size)
    assert observed[3] == 0  # never a missing candidate
    finite = np.isfinite(scores)
    p = np.exp(scores[finite] - scores[finite].max())
    p /= p.sum()
    assert stats.chisquare(observed[finite], p * n).pvalue > P_MIN


def test_exponential_mechanism_neither_overflows_nor_underflows() -> None:
    huge = np.array([[1e300, 1e300 - 1e290, -1e300], [-1e6, -1e6 + 50, -np.inf]])
    chosen = exponential_mechanism(huge, NoiseSource(6))
    assert chosen.tolist() == [0, 1]
    none = exponential_mechanism(np.full((2, 3), -np.inf), NoiseSource(6))
    assert none.tolist() == [-1, -1]
    assert exponential_mechanism(np.empty((2, 0)), NoiseSource(6)).tolist() == [-1, -1]
