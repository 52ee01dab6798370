"""Exact federated medians: order statistics of the union from securely summed counts only.

L1 (``reg:absoluteerror``) sets every leaf to the median residual of its rows, and L1,
pseudo-Huber, Fair and log-cosh start from the labels' median; a median is no sum, and the
server sees nothing but sums. Yet numpy's median is a function of at most two order statistics
(the values at the middle ranks ``(n - 1) // 2``, or ``n / 2 - 1`` and ``n / 2``: ``np.median``
partitions, then takes the mean of those), and an order statistic can be found from counts:

1. Every value maps to a 64-bit key whose unsigned order is the values' order
   (:func:`~p2pboost.homo._binning.order_keys`); the map is a bijection, so the key found is
   the value, bit for bit.
2. A search reads the keys from the most significant bit down. A round asks every client, for
   each open *query* (a group, i.e. a leaf, and a key prefix of ``depth`` bits), how many of its
   values in that group have a key starting with that prefix, by the next ``width`` bits
   (``2**width`` counts per query; :meth:`GroupedKeys.counts`). The first round (``depth`` 0)
   counts whole groups, which gives each group's size ``n`` and so its middle ranks.
3. The server (:class:`MedianSearch`) sums the counts (secure aggregation) and, for each middle
   rank, keeps the one bucket holding it: the values below the bucket are known, so the rank
   within it is too. After 64 bits the prefix is the key of the value at that rank.
4. ``np.median`` of a group's middle order statistics is ``np.median`` of the whole group (the
   same values, the same mean): the core's own functions, given those one or two values per
   group as the rows, compute the core's base margin and leaf values exactly.

Zeros: numpy compares ``-0.0`` equal to ``0.0``, so its partition may leave either at a middle
rank (an accident of row order) where the keys put ``-0.0`` first. It makes no difference:
numpy's mean adds to ``+0.0``, so a median that is zero is ``+0.0`` whichever zeros it took.
The result is numpy's median bit for bit (``tests/homo/test_quantile.py`` checks it over random
splits of random values, signed zeros, ties and infinities included).

Widths: a round costs one secure aggregation, so a search should be short, but every bit more
per round doubles the vector and shows the server the union's counts in twice as many key
ranges. The first round reads 8 bits (the binning's fanout): per group, the counts by sign and
the top 7 bits of the binary exponent, nothing finer. Every later round counts only inside the
ranges that hold a middle rank, and reads more than 8 bits (up to 16) only while the vector stays
within :data:`BUDGET` counts: 6 rounds for the labels' median, 6 to 8 for a tree's leaves (8 from
9 open queries on), where 8 bits per round take 8. The budget is small because the bytes of
wider steps cost more than the rounds they save (measured: ``docs/explanation/homo-medians.md``).

This module is pure (numpy, synchronous): the server holds a :class:`MedianSearch`, each client
a :class:`GroupedKeys`; :class:`RankQuery` is what travels (``CollectMedian``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import RemoteProtocolError
from p2pboost.homo._binning import key_floats, order_keys

__all__ = [
    "BUDGET",
    "KEY_BITS",
    "MAX_WIDTH",
    "MIN_WIDTH",
    "GroupedKeys",
    "MedianSearch",
    "RankQuery",
    "middle_ranks",
    "middle_rows",
    "step_width",
]

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

KEY_BITS = 64
#: Key bits one round reads per query: at least the binning's 8, at most 16.
MIN_WIDTH, MAX_WIDTH = 8, 16
#: Counts per round (all queries) up to which a later round reads more than MIN_WIDTH bits.
BUDGET = 1 << 12


def middle_ranks(n: int) -> tuple[int, ...]:
    """The 0-based ranks whose values ``np.median`` averages among ``n`` values."""
    if n <= 0:
        return ()
    return ((n - 1) // 2,) if n % 2 else (n // 2 - 1, n // 2)


def step_width(depth: int, n_queries: int) -> int:
    """Key bits the next round reads below ``depth``, for ``n_queries`` queries: the first
    round :data:`MIN_WIDTH` (it counts whole groups: coarse); a later one as many as keep the
    vector within :data:`BUDGET` counts, between the widths' bounds, never more than remain."""
    if depth == 0:
        return MIN_WIDTH
    fit = (BUDGET // max(n_queries, 1)).bit_length() - 1
    return min(KEY_BITS - depth, max(MIN_WIDTH, min(MAX_WIDTH, fit)))


@dataclass(frozen=True, slots=True)
class RankQuery:
    """One round of a search: for each ``(group[i], prefix[i])`` (``prefix``: a key's first
    ``depth`` bits), the counts of the values of that group whose key starts so, by the next
    ``width`` bits, ``2**width`` counts per query (flat, query by query)."""

    depth: int
    width: int
    group: I64
    prefix: U64

    @property
    def length(self) -> int:
        return int(self.group.size) << self.width

    def problem(self) -> str | None:
        """Why this is no well-formed query (None: it is)."""
        if self.group.shape != self.prefix.shape:
            return "group and prefix differ in length"
        if not 0 <= self.depth < KEY_BITS or not 1 <= self.width <= MAX_WIDTH:
            return "depth or width out of range"
        if self.depth + self.width > KEY_BITS:
            return "the query reads past a key's last bit"
        if self.group.size and int(self.group.min()) < 0:
            return "a group below 0"
        if self.prefix.size and int(self.prefix.max()) >> self.depth:
            return f"a prefix longer than {self.depth} bits"
        if len(set(self.pairs())) != self.group.size:
            return "a query asked twice"
        return None

    def pairs(self) -> list[tuple[int, int]]:
        """The queries as ``(group, prefix)`` pairs."""
        return list(zip(self.group.tolist(), self.prefix.tolist(), strict=True))

    def follows(self, previous: RankQuery | None) -> str | None:
        """Why this query is not the next step of a median search after ``previous`` (None:
        it is). Depth 0 starts a search: one query per group. A later step reads the bits after
        ``previous``'s, under at most two prefixes per group (two middle ranks), each extending
        a prefix ``previous`` asked about in that group. So one search shows the server no more
        counts than an honest one: two paths per group (which ranges they follow is the
        server's choice, which a client cannot check; a new search may start at any time, as
        after a dropout)."""
        if self.depth == 0:
            return None if not self.prefix.any() else "a first step with a prefix"
        if previous is None or self.depth != previous.depth + previous.width:
            return f"a step at bit {self.depth} that does not follow the previous one"
        if max(Counter(self.group.tolist()).values(), default=0) > 2:
            return "more than two prefixes in one group"
        asked = set(previous.pairs())
        if any((g, p >> previous.width) not in asked for g, p in self.pairs()):
            return "a prefix that extends none of the previous step's"
        return None


class GroupedKeys:
    """A client's values by group (``groups[i]`` holds ``values[i]``), as sorted keys: what
    it answers :class:`RankQuery` s from."""

    def __init__(self, values: F64, groups: I64) -> None:
        keys = order_keys(values)
        order = np.lexsort((keys, groups))
        self.groups = np.ascontiguousarray(groups[order], dtype=np.int64)
        self.keys = keys[order]

    def counts(self, query: RankQuery) -> I64:
        """The counts ``query`` asks for (int64, flat)."""
        fan, low = 1 << query.width, KEY_BITS - query.depth  # low: bits below the prefix
        out = np.zeros((query.group.size, fan), dtype=np.int64)
        for i, (g, p) in enumerate(query.pairs()):
            start = int(np.searchsorted(self.groups, g, side="left"))
            end = int(np.searchsorted(self.groups, g, side="right"))
            part = self.keys[start:end]
            if query.depth:
                lo = np.searchsorted(part, np.uint64(p << low), side="left")
                top = (p + 1) << low
                hi = part.size if top >> KEY_BITS else np.searchsorted(part, np.uint64(top))
                part = part[lo:hi]
            digits = (part >> np.uint64(low - query.width)) & np.uint64(fan - 1)
            out[i] = np.bincount(digits.astype(np.intp), minlength=fan)
        return out.reshape(-1)


@dataclass
class _Target:
    """The search for the value at 0-based ``rank`` of ``group``: its key's first bits so far
    (``prefix``) and how many of the group's values lie below the prefix's range."""

    group: int
    rank: int
    prefix: int = 0
    below: int = 0


class MedianSearch:
    """The server's side: :meth:`query`, :meth:`feed` with the summed counts, until
    :attr:`done`; then :meth:`middle`. ``groups``: the groups (leaves) whose medians are
    wanted; a group without values has none."""

    def __init__(self, groups: Iterable[int]) -> None:
        first = np.array(sorted({int(g) for g in groups}), dtype=np.int64)
        self._query = RankQuery(
            0, step_width(0, first.size), first, np.zeros(first.size, dtype=np.uint64)
        )
        self._targets: list[_Target] = []
        #: (group, prefix) -> how many values the next round must count under that prefix.
        self._expected: dict[tuple[int, int], int] = {}
        self.done = first.size == 0

    def query(self) -> RankQuery:
        """The next round's question."""
        if self.done:
            raise RuntimeError("the median search is over")
        return self._query

    def feed(self, counts: I64, peer: str | None = None) -> None:
        """Advance with the summed answer to :meth:`query` (``peer``: whom to blame for sums
        that contradict the previous round's)."""
        q = self.query()
        if counts.shape != (q.length,) or (counts.size and int(counts.min()) < 0):
            raise RemoteProtocolError("rank counts have the wrong shape or sign", peer=peer)
        table = counts.reshape(q.group.size, 1 << q.width)
        totals = table.sum(axis=1).tolist()
        row_of = {}
        for i, (g, p) in enumerate(q.pairs()):
            row_of[g, p] = i
            if q.depth == 0:
                self._targets += [_Target(g, r) for r in middle_ranks(totals[i])]
            elif totals[i] != self._expected[g, p]:
                raise RemoteProtocolError(f"rank counts of group {g} changed", peer=peer)
        self._expected = {}
        for t in self._targets:
            row = table[row_of[t.group, t.prefix]]
            cum = t.below + np.cumsum(row)
            bucket = int(np.searchsorted(cum, t.rank, side="right"))  # rank < cum[-1]: checked
            t.below = int(cum[bucket - 1]) if bucket else t.below
            t.prefix = (t.prefix << q.width) | bucket
            self._expected[t.group, t.prefix] = int(row[bucket])
        depth = q.depth + q.width
        pairs = list(dict.fromkeys((t.group, t.prefix) for t in self._targets))
        if depth == KEY_BITS or not pairs:
            self.done = True
            return
        self._query = RankQuery(
            depth,
            step_width(depth, len(pairs)),
            np.array([g for g, _ in pairs], dtype=np.int64),
            np.array([p for _, p in pairs], dtype=np.uint64),
        )

    def middle(self) -> dict[int, F64]:
        """Each group's values at its middle ranks (one or two, ascending), by group; groups
        without values are left out. ``np.median`` of them is the group's median."""
        if not self.done:
            raise RuntimeError("the median search is not finished")
        found: dict[int, list[int]] = {}
        for t in self._targets:
            found.setdefault(t.group, []).append(t.prefix)
        return {g: key_floats(np.array(k, dtype=np.uint64)) for g, k in found.items()}


def middle_rows(middle: dict[int, F64]) -> tuple[F64, I64]:
    """:meth:`MedianSearch.middle` as rows: the values and their groups, for the core's own
    functions (whose medians of these rows are the medians of all the rows)."""
    if not middle:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    values = np.concatenate(list(middle.values()))
    groups = np.concatenate([np.full(v.size, g, dtype=np.int64) for g, v in middle.items()])
    return values, groups
