"""WOE/IV: integer counts and WOE equal a row-by-row plaintext computation exactly."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.woe import SMOOTHING, bin_counts, select_by_iv, woe_bins, woe_iv, woe_table


def _credit_like(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    X[:, 2] = rng.integers(0, 3, size=n)  # three values: some bins without events
    risk = 1.2 * X[:, 0] - 0.4 * X[:, 1] + (X[:, 2] == 2) * 3.0
    y = (rng.random(n) < 1 / (1 + np.exp(-(risk - 2.0)))).astype(np.int64)
    X[rng.random(n) < 0.05, 1] = np.nan  # feature 1 has missing values, the others none
    X[(X[:, 2] == 0) & (y == 1), 2] = 1  # value 0 holds non-events only
    return X, y


def _plaintext(codes: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float], float]:
    """WOE per bin and IV of one feature's codes, row by row with Python integers."""
    events = Counter(int(c) for c, label in zip(codes, y, strict=True) if label == 1)
    non_events = Counter(int(c) for c, label in zip(codes, y, strict=True) if label == 0)
    total_e, total_ne = sum(events.values()), sum(non_events.values())
    woe: list[float] = []
    terms: list[float] = []
    for b in range(int(codes.max()) + 1):
        e: float = events.get(b, 0)
        ne: float = non_events.get(b, 0)
        if e + ne == 0:
            woe.append(0.0)
            terms.append(0.0)
            continue
        if e == 0 or ne == 0:
            e, ne = e + SMOOTHING, ne + SMOOTHING
        d_e, d_ne = e / total_e, ne / total_ne
        w = math.log(d_ne / d_e)
        woe.append(w)
        terms.append((d_ne - d_e) * w)
    return woe, terms, math.fsum(terms)


def test_counts_woe_and_iv_equal_a_plaintext_computation() -> None:
    X, y = _credit_like()
    mapper = BinMapper(8).fit(X)
    data = mapper.transform(X)
    events, non_events = bin_counts(data.codes, y, data.n_slots)
    assert events.dtype == np.int64
    for f in range(X.shape[1]):
        ref = Counter((int(c), int(label)) for c, label in zip(data.codes[f], y, strict=True))
        for b in range(data.n_slots):
            assert events[f, b] == ref.get((b, 1), 0)
            assert non_events[f, b] == ref.get((b, 0), 0)
    woe, terms = woe_iv(events, non_events)
    for f in range(X.shape[1]):
        ref_woe, ref_terms, ref_iv = _plaintext(data.codes[f].astype(np.int64), y)
        n = len(ref_woe)
        assert woe[f, :n].tolist() == ref_woe
        assert terms[f, :n].tolist() == ref_terms
        assert terms[f].sum() == pytest.approx(ref_iv, rel=1e-12, abs=0)
    table = woe_table(mapper, events, non_events)
    # The feature with a value bin of non-events only is smoothed, not infinite.
    assert all(np.all(np.isfinite(t.woe)) for t in table)
    assert table[2].events[0] == 0
    assert table[2].woe[0] > 0
    # No missing values in feature 0: its missing bin is empty and adds nothing.
    assert table[0].events[-1] == table[0].non_events[-1] == 0
    assert table[0].iv_terms[-1] == 0
    assert table[1].events[-1] + table[1].non_events[-1] > 0
    # The strong driver ranks first; IV never negative.
    ivs = np.array([t.iv for t in table])
    assert np.all(ivs >= 0)
    assert ivs[0] > ivs[3]
    assert ivs[2] > ivs[3]


def test_monotone_merging_gives_monotone_woe_and_keeps_the_missing_bin() -> None:
    # Value bins' event rates: 10%, 30%, 20%, 50%, 40%, 60%; missing bin 90%.
    totals = np.array([100, 100, 100, 100, 100, 100, 10])
    events = np.array([10, 30, 20, 50, 40, 60, 9])
    edges = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    plain = woe_bins(events, totals - events, edges)
    assert plain.woe.size == 7
    down = woe_bins(events, totals - events, edges, monotone="decreasing")
    assert np.all(np.diff(down.woe[:-1]) <= 0)  # more risk to the right: WOE decreasing
    np.testing.assert_array_equal(down.events, [10, 50, 90, 60, 9])
    np.testing.assert_array_equal(down.edges, [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(down.bin_of, [0, 1, 1, 2, 2, 3, 4])
    assert down.events.sum() == events.sum()
    assert down.woe[-1] == plain.woe[-1]
    auto = woe_bins(events, totals - events, edges, monotone="auto")
    np.testing.assert_array_equal(auto.events, down.events)
    up = woe_bins(events, totals - events, edges, monotone="increasing")
    assert np.all(np.diff(up.woe[:-1]) >= 0)
    assert up.iv < auto.iv
    # The merged counts' WOE is the WOE of the merged counts (one definition).
    np.testing.assert_array_equal(down.woe, woe_iv(down.events, down.non_events)[0])


def test_selection_by_threshold_and_top_k() -> None:
    iv = np.array([0.01, 0.4, 0.15, 0.4, 0.05])
    np.testing.assert_array_equal(select_by_iv(iv, threshold=0.1), [1, 2, 3])
    np.testing.assert_array_equal(select_by_iv(iv, top_k=2), [1, 3])
    np.testing.assert_array_equal(select_by_iv(iv, threshold=0.1, top_k=1), [1])
    np.testing.assert_array_equal(select_by_iv(iv), [0, 1, 2, 3, 4])


def test_bad_counts_are_refused() -> None:
    with pytest.raises(InputError, match="non-negative"):
        woe_iv([1, -1, 2], [3, 4, 5])
    with pytest.raises(InputError, match="integer"):
        woe_iv([1.5, 1, 2], [3, 4, 5])
    with pytest.raises(InputError, match="one event"):
        woe_iv([0, 0], [3, 4])
    with pytest.raises(InputError, match="entries"):
        woe_bins([1, 2], [3, 4], [0.5])
    with pytest.raises(InputError, match=r"0 \(non-event\) or 1"):
        bin_counts(np.zeros((1, 3), dtype=np.uint8), [0, 2, 1], 4)
