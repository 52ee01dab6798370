"""Federated medians (``p2pboost.homo._quantile``): the search over summed counts finds
numpy's median of every group exactly, however the rows are split among clients."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.exceptions import RemoteProtocolError
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo._quantile import (
    BUDGET,
    GroupedKeys,
    MedianSearch,
    RankQuery,
    middle_ranks,
    middle_rows,
)

#: Values that make ties, zeros of both signs, subnormals, extremes and infinities likely.
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, 5e-324, -5e-324, 1e308, -1.7e308, np.inf, -np.inf]
VALUES = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=False))


def _search(clients: list[GroupedKeys], groups: list[int]) -> tuple[dict[int, np.ndarray], int]:
    """Run a search as the server would, over the clients' summed counts (each query checked as
    a client checks it); the middle values and the rounds it took."""
    search = MedianSearch(groups)
    previous: RankQuery | None = None
    rounds = 0
    while not search.done:
        q = search.query()
        assert q.problem() is None
        assert q.follows(previous) is None
        search.feed(sum((c.counts(q) for c in clients), np.zeros(q.length, dtype=np.int64)))
        previous, rounds = q, rounds + 1
    return search.middle(), rounds


def _bits(x: float) -> int:
    return int(np.float64(x).view(np.uint64))


def _same_median(got: float, want: float) -> bool:
    """Bit for bit (NaN: both NaN, from ``inf + -inf``)."""
    return bool(np.isnan(got) and np.isnan(want)) or _bits(got) == _bits(want)


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.tuples(VALUES, st.integers(0, 4), st.integers(0, 2)), max_size=40),
    asked=st.sets(st.integers(0, 6), max_size=7),
)
def test_federated_median_is_numpys_over_any_split(
    data: list[tuple[float, int, int]], asked: set[int]
) -> None:
    """Random values (ties, signed zeros, one row, empty groups) in random groups, split among
    three clients at random: every asked group's median is np.median's, bit for bit."""
    values = np.array([v for v, _, _ in data], dtype=np.float64)
    groups = np.array([g for _, g, _ in data], dtype=np.int64)
    owner = np.array([c for _, _, c in data], dtype=np.int64)
    clients = [GroupedKeys(values[owner == c], groups[owner == c]) for c in range(3)]
    middle, _ = _search(clients, sorted(asked))
    with np.errstate(over="ignore", invalid="ignore"):  # inf + -inf, 1e308 + 1e308
        for g in sorted(asked):
            mine = values[groups == g]
            if mine.size == 0:
                assert g not in middle
                continue
            assert middle[g].size == len(middle_ranks(mine.size))
            got, want = float(np.median(middle[g])), float(np.median(mine))
            assert _same_median(got, want), (g, got, want, mine)


@settings(max_examples=50, deadline=None)
@given(
    residual=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_cores_refit_given_the_middle_rows_is_the_cores_refit(
    residual: list[float], seed: int
) -> None:
    """What the server does: the core's L1 refit, given each leaf's middle values as its rows,
    equals the core's refit on all the rows (leaves without rows: 0)."""
    rng = np.random.default_rng(seed)
    y = np.asarray(residual)
    margin = rng.normal(0.0, 10.0, (y.size, 1))
    leaf = rng.integers(1, 6, y.size)
    objective = get_objective(BoostParams(objective="reg:absoluteerror"))
    want = objective.refit_leaves(y, margin, leaf, 7)
    owner = rng.integers(0, 2, y.size)
    res = y - margin[:, 0]
    clients = [GroupedKeys(res[owner == c], leaf[owner == c]) for c in range(2)]
    middle, _ = _search(clients, [1, 2, 3, 4, 5, 6])
    values, groups = middle_rows(middle)
    got = objective.refit_leaves(values, np.zeros((values.size, 1)), groups, 7)
    assert got is not None
    assert want is not None
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_zeros_of_either_sign_and_ties() -> None:
    """numpy's median of zeros is +0.0 whichever zeros sit in the middle (its mean adds to
    +0.0), so ordering -0.0 below 0.0, as the keys do, changes nothing; equal values are
    found as often as they occur."""
    for zeros in ([-0.0, -0.0, 3.0], [-0.0, 0.0, -0.0, 0.0], [0.0, -0.0]):
        values = np.array(zeros)
        middle, _ = _search([GroupedKeys(values, np.zeros(values.size, dtype=np.int64))], [0])
        assert _same_median(float(np.median(middle[0])), float(np.median(values)))
    tied = [GroupedKeys(np.full(5, 7.25), np.zeros(5, dtype=np.int64)) for _ in range(2)]
    middle, _ = _search(tied, [0])
    np.testing.assert_array_equal(middle[0], [7.25, 7.25])


def test_rounds_stay_few_and_vectors_small() -> None:
    """The labels' median takes 6 rounds (8 bits, then 12); 64 leaves with two middle ranks
    each take 8 of 8 bits. A later round reads more than 8 bits only within the budget."""
    rng = np.random.default_rng(3)
    labels = GroupedKeys(rng.normal(size=101), np.zeros(101, dtype=np.int64))
    assert _search([labels], [0])[1] == 6
    leaves = GroupedKeys(rng.normal(size=640), np.repeat(np.arange(64), 10))
    search, rounds = MedianSearch(range(64)), 0
    while not search.done:
        q = search.query()
        assert q.width == 8 or (rounds > 0 and q.length <= BUDGET)
        search.feed(leaves.counts(q))
        rounds += 1
    assert rounds == 8


def test_sums_that_contradict_the_previous_round_are_refused() -> None:
    a = GroupedKeys(np.array([1.0, 2.0, 3.0]), np.zeros(3, dtype=np.int64))
    b = GroupedKeys(np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4, dtype=np.int64))
    search = MedianSearch([0])
    search.feed(a.counts(search.query()))
    with pytest.raises(RemoteProtocolError, match="rank counts of group 0 changed"):
        search.feed(b.counts(search.query()))  # a client's rows changed between rounds
    with pytest.raises(RemoteProtocolError, match="shape or sign"):
        MedianSearch([0]).feed(np.full(256, -1, dtype=np.int64))


def _q(depth: int, width: int, group: list[int], prefix: list[int]) -> RankQuery:
    return RankQuery(depth, width, np.array(group), np.array(prefix, dtype=np.uint64))


@pytest.mark.parametrize(
    ("query", "match"),
    [
        (_q(8, 8, [0, 1], [1]), "differ in length"),
        (_q(64, 8, [0], [0]), "depth or width"),
        (_q(8, 17, [0], [0]), "depth or width"),
        (_q(56, 16, [0], [0]), "past a key's last bit"),
        (_q(8, 8, [-1], [0]), "below 0"),
        (_q(8, 8, [0], [256]), "longer than 8 bits"),
        (_q(8, 8, [0, 0], [3, 3]), "asked twice"),
    ],
)
def test_malformed_queries_are_named(query: RankQuery, match: str) -> None:
    problem = query.problem()
    assert problem is not None
    assert match in problem


def test_a_client_answers_only_a_narrowing_search() -> None:
    first = _q(0, 8, [2, 5], [0, 0])
    second = _q(8, 12, [2, 5, 5], [0x80, 0x80, 0x7F])
    assert first.follows(None) is None
    assert first.follows(second) is None  # a new search may start at any time
    assert second.follows(first) is None
    assert "does not follow" in (second.follows(None) or "")
    assert "does not follow" in (_q(16, 8, [2], [1]).follows(first) or "")
    assert "a first step with a prefix" in (_q(0, 8, [2], [1]).follows(None) or "")
    three = _q(8, 8, [2, 2, 2], [1, 2, 3])
    assert "more than two prefixes" in (three.follows(first) or "")
    # Under group 2 the previous step asked prefix 0x80 only; 0x7F is another range.
    stray = _q(20, 8, [2], [(0x7F << 12) | 5])
    assert "extends none" in (stray.follows(second) or "")
