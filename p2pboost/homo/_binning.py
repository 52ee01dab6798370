"""Federated quantile binning: the union's bin edges from securely summed counts only.

Goal: the cut points :class:`~p2pboost.gbdt.binning.BinMapper` would learn on the *union* of
the clients' rows, although no client shows its values and the server sees only sums of counts.

Every finite float maps to a 64-bit key whose unsigned order is the float order (flip the sign
bit of positives, all bits of negatives). Keys are read 8 bits at a time, most significant
first, so a *prefix* of ``8 * level`` bits names a range of values, and a round asks every
client, for some prefixes, how many of its values fall in each of the 256 child ranges. The
sums (through secure aggregation) drive two searches, each 8 rounds deep:

1. **Distinct values** (all features): expand every occupied prefix, breadth first. A feature
   with at most ``max_bin`` distinct values ends with all of them and their counts, from which
   the cuts are the midpoints, as in the core. A feature that shows more occupied prefixes
   than that leaves this search.
2. **Order statistics** (the other features): the core cuts after the distinct value holding
   rank ``ceil(N * k / max_bin)``, at the midpoint to the next distinct value. A descent by
   rank finds each such value; a second descent finds the value at rank ``count(<= v) + 1``.

What the server learns is what the edges reveal anyway plus counts of the union per key range;
nothing per client. The server holds this state (:class:`EdgeSearch`); clients only answer
:func:`child_counts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import RemoteProtocolError

__all__ = ["EdgeSearch", "Query", "child_counts", "float_keys", "key_floats", "order_keys"]

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_SIGN = np.uint64(1 << 63)
_FANOUT = 256
_LEVELS = 8


def order_keys(values: F64) -> U64:
    """Keys whose unsigned order is the order of ``values`` (element-wise): the sign bit of a
    positive value set, every bit of a negative one flipped. ``-0.0`` keeps a key of its own,
    just below ``0.0``'s; NaNs sort beyond the infinities."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def float_keys(col: F64) -> U64:
    """Sorted order-preserving keys of the finite values of ``col`` (``-0.0`` is ``0.0``)."""
    finite = np.asarray(col, dtype=np.float64)
    keys = order_keys(finite[np.isfinite(finite)] + 0.0)
    keys.sort()
    return keys


def key_floats(keys: U64) -> F64:
    """Inverse of :func:`float_keys` (element-wise)."""
    keys = np.asarray(keys, dtype=np.uint64)
    bits = np.where(keys & _SIGN, keys & ~_SIGN, ~keys)
    return bits.view(np.float64)


@dataclass(frozen=True, slots=True)
class Query:
    """One round's question: for each ``(feature[i], prefix[i])`` the 256 child counts."""

    level: int
    feature: I64
    prefix: U64

    def __post_init__(self) -> None:
        if not 0 <= self.level < _LEVELS or self.feature.shape != self.prefix.shape:
            raise ValueError("bad binning query")

    @property
    def length(self) -> int:
        return int(self.feature.size) * _FANOUT


def child_counts(keys: list[U64], query: Query) -> npt.NDArray[np.int64]:
    """A client's answer to ``query`` from its sorted keys per feature (int64, flat)."""
    shift = 64 - 8 * query.level  # bits below the prefix
    out = np.zeros((query.feature.size, _FANOUT), dtype=np.int64)
    for i, (f, p) in enumerate(zip(query.feature.tolist(), query.prefix.tolist(), strict=True)):
        col = keys[f]
        if query.level == 0:
            part = col
        else:
            lo = np.searchsorted(col, np.uint64(p << shift), side="left")
            top = (p + 1) << shift
            hi = col.size if top >= 1 << 64 else np.searchsorted(col, np.uint64(top), side="left")
            part = col[lo:hi]
        digits = (part >> np.uint64(shift - 8)) & np.uint64(0xFF)
        out[i] = np.bincount(digits.astype(np.intp), minlength=_FANOUT)
    return out.reshape(-1)


class _Stage(Enum):
    DISTINCT = "distinct"
    RANK = "rank"
    SUCCESSOR = "successor"
    DONE = "done"


@dataclass
class _Descent:
    """Search for the value at 1-based ``rank`` of one feature."""

    feature: int
    rank: int
    prefix: int = 0
    below: int = 0  # values with a key under the current prefix's range
    le: int = 0  # at the end: values <= the found value


class EdgeSearch:
    """The server's side of federated binning: :meth:`query`, :meth:`feed`, then :meth:`edges`.

    ``n_features`` and ``max_bin`` as in :class:`~p2pboost.gbdt.binning.BinMapper`.
    ``peer`` names who is to blame for inconsistent sums (the aggregate's contributors).
    """

    def __init__(self, n_features: int, max_bin: int) -> None:
        self.n_features = n_features
        self.max_bin = max_bin
        self.level = 0
        self.stage = _Stage.DISTINCT
        # Distinct search: per feature, occupied prefixes at this level and their counts.
        self._open: dict[int, tuple[list[int], list[int]]] = {
            f: ([0], [0]) for f in range(n_features)
        }
        self._distinct: dict[int, tuple[F64, I64]] = {}
        self._totals: dict[int, int] = {}
        self._many: list[int] = []
        self._descents: list[_Descent] = []
        self._lo: dict[int, list[int]] = {}  # feature -> keys of the cuts' lower values
        self._hi: dict[int, list[int]] = {}  # feature -> keys of the next distinct values

    @property
    def done(self) -> bool:
        return self.stage is _Stage.DONE

    def query(self) -> Query:
        """The next round's question."""
        if self.stage is _Stage.DISTINCT:
            feats = [f for f, (pre, _) in self._open.items() for _ in pre]
            prefixes = [p for pre, _ in self._open.values() for p in pre]
        elif self.stage in (_Stage.RANK, _Stage.SUCCESSOR):
            feats = [d.feature for d in self._descents]
            prefixes = [d.prefix for d in self._descents]
        else:
            raise RuntimeError("the edge search is over")
        return Query(
            self.level, np.array(feats, dtype=np.int64), np.array(prefixes, dtype=np.uint64)
        )

    def feed(self, counts: npt.NDArray[np.int64], peer: str | None = None) -> None:
        """Advance with the aggregated answer to :meth:`query`."""
        q = self.query()
        if counts.shape != (q.length,) or (counts.size and int(counts.min()) < 0):
            raise RemoteProtocolError("binning counts have the wrong shape or sign", peer=peer)
        table = counts.reshape(-1, _FANOUT)
        if self.stage is _Stage.DISTINCT:
            self._feed_distinct(table, peer)
        else:
            self._feed_descent(table, peer)

    # -- stage 1 ------------------------------------------------------------------------------

    def _feed_distinct(self, table: npt.NDArray[np.int64], peer: str | None) -> None:
        row = 0
        new_open: dict[int, tuple[list[int], list[int]]] = {}
        for f, (prefixes, _) in self._open.items():
            pre_out: list[int] = []
            cnt_out: list[int] = []
            for p in prefixes:
                occupied = np.flatnonzero(table[row])
                pre_out += [(p << 8) | int(d) for d in occupied]
                cnt_out += table[row, occupied].tolist()
                row += 1
            if self.level == 0:
                self._totals[f] = int(sum(cnt_out))
            elif sum(cnt_out) != self._totals[f]:
                raise RemoteProtocolError(f"binning counts of feature {f} changed", peer=peer)
            if len(pre_out) > self.max_bin:
                self._many.append(f)
            elif self.level == _LEVELS - 1:
                keys = np.array(pre_out, dtype=np.uint64)
                self._distinct[f] = (key_floats(keys), np.array(cnt_out, dtype=np.int64))
            elif pre_out:
                new_open[f] = (pre_out, cnt_out)
            else:
                self._distinct[f] = (np.empty(0), np.empty(0, dtype=np.int64))
        self._open = new_open
        self.level += 1
        if self.level == _LEVELS or not self._open:
            self._start_ranks()

    # -- stages 2 and 3 -----------------------------------------------------------------------

    def _start_ranks(self) -> None:
        self.level = 0
        self._descents = []
        for f in self._many:
            n = self._totals[f]
            targets = n * np.arange(1, self.max_bin) / self.max_bin  # as the core computes them
            ranks = sorted({int(np.ceil(t)) for t in targets})
            self._descents += [_Descent(f, r) for r in ranks]
        self.stage = _Stage.RANK if self._descents else _Stage.DONE

    def _feed_descent(self, table: npt.NDArray[np.int64], peer: str | None) -> None:
        for d, row in zip(self._descents, table, strict=True):
            cum = d.below + np.cumsum(row)
            c = int(np.searchsorted(cum, d.rank, side="left"))
            if c >= _FANOUT:
                raise RemoteProtocolError(
                    f"binning counts of feature {d.feature} shrank", peer=peer
                )
            d.below = int(cum[c - 1]) if c else d.below
            d.prefix = (d.prefix << 8) | c
            d.le = int(cum[c])
        self.level += 1
        if self.level < _LEVELS:
            return
        self.level = 0
        if self.stage is _Stage.RANK:
            # Keep each distinct value once, drop the largest value (nothing above it).
            nxt: list[_Descent] = []
            seen: set[tuple[int, int]] = set()
            for d in self._descents:
                if (d.feature, d.prefix) in seen or d.le >= self._totals[d.feature]:
                    continue
                seen.add((d.feature, d.prefix))
                self._lo.setdefault(d.feature, []).append(d.prefix)
                nxt.append(_Descent(d.feature, d.le + 1))
            self._descents = nxt
            self.stage = _Stage.SUCCESSOR if nxt else _Stage.DONE
        else:
            for d in self._descents:
                self._hi.setdefault(d.feature, []).append(d.prefix)
            self.stage = _Stage.DONE

    # -- result -------------------------------------------------------------------------------

    def edges(self) -> list[F64]:
        """Cut points per feature, computed as :class:`BinMapper` computes them."""
        if not self.done:
            raise RuntimeError("the edge search is not finished")
        out: list[F64] = []
        for f in range(self.n_features):
            if f in self._distinct:
                distinct = self._distinct[f][0]
                lo, hi = distinct[:-1], distinct[1:]
            elif f in self._lo:
                lo = key_floats(np.array(self._lo[f], dtype=np.uint64))
                hi = key_floats(np.array(self._hi[f], dtype=np.uint64))
            else:
                lo = hi = np.empty(0)
            mid = lo + (hi - lo) / 2.0
            cuts = np.where(np.isfinite(mid) & (mid < hi), mid, lo)
            out.append(np.ascontiguousarray(cuts, dtype=np.float64))
        return out
