"""Weight of evidence and information value per bin, from integer event counts.

Why: credit-risk teams drop weak features before training and read a feature's risk shape
from its WOE curve; information value (IV) is the screening statistic model reviewers expect.
Everything here starts from **integer counts per bin** (events = label 1, non-events = label
0), not from rows, so the same functions serve a party that counts its own rows
(:func:`bin_counts`) and the vertical guest that decrypts the hosts' encrypted counts: equal
counts give bit-for-bit equal WOE and IV.

Definitions (one feature; ``E``, ``N``: its total events and non-events, all bins including
missing):

* ``WOE[b] = ln((non_events[b] / N) / (events[b] / E))``: Siddiqi's "distribution of goods
  over distribution of bads" when the event is the bad outcome (default), so a **positive WOE
  is a bin with lower risk than average**, a negative one higher risk;
* ``IV = sum_b (non_events[b] / N - events[b] / E) * WOE[b]`` (never negative). Usual reading:
  < 0.02 useless, 0.02-0.1 weak, 0.1-0.3 medium, > 0.3 strong (and > 0.5 suspiciously strong).

Smoothing rule (:data:`SMOOTHING`): a bin with rows but no events, or no non-events, has an
infinite WOE; there ``smoothing`` (0.5 by default, as scorecard tools and FATE's
``adjustment_factor`` do) is added to **both** of that bin's counts, the totals ``E`` and ``N``
staying the raw ones. A bin with no rows at all (typically the missing bin of a feature
without missing values, or a value bin no row fell in) carries no evidence: WOE 0 and IV term
0, so empty bins never inflate IV.

Bins are the core's quantile bins (:class:`~p2pboost.gbdt.binning.BinMapper`: the same edges
as training), value bins first and the missing bin last as its own bin. Optional monotone
merging joins adjacent value bins until the value bins' WOE is monotone (the missing bin is
never merged: it has no place in the order).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinMapper

__all__ = [
    "SMOOTHING",
    "WoeBins",
    "bin_counts",
    "select_by_iv",
    "woe_bins",
    "woe_iv",
    "woe_table",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Monotone = Literal["auto", "increasing", "decreasing"] | None

#: Added to both counts of a bin that has rows but no events or no non-events.
SMOOTHING = 0.5


@dataclass(frozen=True, slots=True, eq=False)
class WoeBins:
    """One feature's bins after optional merging: value bins in order, then the missing bin.

    ``edges`` are the cut points between the value bins (a subset of the mapper's, so a raw
    value ``x`` is in value bin ``#{e in edges : e < x}`` as in training); ``bin_of[code]``
    maps each of the mapper's value-bin codes to a value bin here (the missing code maps to
    the last bin).
    """

    events: I64
    non_events: I64
    woe: F64
    iv_terms: F64
    edges: F64
    bin_of: I64

    @property
    def iv(self) -> float:
        """The feature's information value (the sum of the bins' terms)."""
        return float(self.iv_terms.sum())


def bin_counts(codes: npt.NDArray[Any], labels: Any, n_slots: int) -> tuple[I64, I64]:
    """Event and non-event counts ``(features, n_slots)`` of bin codes ``(features, rows)``
    (feature-major, as :class:`~p2pboost.gbdt.binning.BinnedData`) and 0/1 ``labels``.

    The plaintext count a party takes of its own rows; the vertical protocol gets the same
    integers for host features from one encrypted pass.
    """
    y = _labels(labels)
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != y.size:
        raise InputError(f"codes must be (features, {y.size}) for {y.size} labels")
    if codes.size and (codes.min() < 0 or codes.max() >= n_slots):
        raise InputError(f"bin codes must be in [0, {n_slots})")
    event = y == 1
    events = np.zeros((codes.shape[0], n_slots), dtype=np.int64)
    totals = np.zeros((codes.shape[0], n_slots), dtype=np.int64)
    for f in range(codes.shape[0]):
        col = codes[f].astype(np.int64)
        events[f] = np.bincount(col[event], minlength=n_slots)
        totals[f] = np.bincount(col, minlength=n_slots)
    return events, totals - events


def woe_iv(events: Any, non_events: Any, *, smoothing: float = SMOOTHING) -> tuple[F64, F64]:
    """WOE and IV terms per bin (last axis; a batch of features on the leading axes), by the
    module's definitions and smoothing rule."""
    e = _counts(events, "events")
    ne = _counts(non_events, "non_events")
    if e.shape != ne.shape:
        raise InputError("events and non_events must have the same shape")
    if not (isinstance(smoothing, int | float) and smoothing > 0):
        raise InputError(f"smoothing must be positive, got {smoothing!r}")
    total_e = e.sum(axis=-1, keepdims=True).astype(np.float64)
    total_ne = ne.sum(axis=-1, keepdims=True).astype(np.float64)
    if np.any(total_e == 0) or np.any(total_ne == 0):
        raise InputError("WOE needs at least one event and one non-event")
    rows = (e + ne) > 0
    adjust = rows & ((e == 0) | (ne == 0))
    e_adj = np.where(adjust, e + smoothing, e).astype(np.float64)
    ne_adj = np.where(adjust, ne + smoothing, ne).astype(np.float64)
    dist_e = e_adj / total_e
    dist_ne = ne_adj / total_ne
    with np.errstate(divide="ignore", invalid="ignore"):
        woe = np.where(rows, np.log(dist_ne / np.where(rows, dist_e, 1.0)), 0.0)
    iv_terms = np.where(rows, (dist_ne - dist_e) * woe, 0.0)
    return np.asarray(woe), np.asarray(iv_terms)


def woe_bins(
    events: Any,
    non_events: Any,
    edges: Any,
    *,
    monotone: Monotone = None,
    smoothing: float = SMOOTHING,
) -> WoeBins:
    """One feature's :class:`WoeBins` from counts per bin (value bins, then missing last: one
    more than ``len(edges) + 1`` entries) and its cut points ``edges``.

    ``monotone``: None keeps the bins; ``"increasing"`` / ``"decreasing"`` merge adjacent value
    bins (the leftmost violating pair first, repeatedly) until their WOE is monotone in that
    direction; ``"auto"`` does both and keeps the one with the larger IV (increasing on a tie).
    """
    e = _counts(events, "events").reshape(-1)
    ne = _counts(non_events, "non_events").reshape(-1)
    cuts = np.asarray(edges, dtype=np.float64).reshape(-1)
    if e.shape != ne.shape or e.size != cuts.size + 2:
        raise InputError(
            f"{cuts.size} edges make {cuts.size + 1} value bins and a missing bin: "
            f"counts must have {cuts.size + 2} entries"
        )
    if monotone is None:
        groups = list(range(cuts.size + 1))
    elif monotone in ("increasing", "decreasing"):
        groups = _monotone_groups(e, ne, monotone == "increasing", smoothing)
    elif monotone == "auto":
        up = _monotone_groups(e, ne, True, smoothing)
        down = _monotone_groups(e, ne, False, smoothing)
        iv_up = _merged(e, ne, cuts, up, smoothing).iv
        iv_down = _merged(e, ne, cuts, down, smoothing).iv
        groups = up if iv_up >= iv_down else down
    else:
        raise InputError(
            f"monotone must be None, 'auto', 'increasing' or 'decreasing': {monotone!r}"
        )
    return _merged(e, ne, cuts, groups, smoothing)


def woe_table(
    mapper: BinMapper,
    events: Any,
    non_events: Any,
    *,
    monotone: Monotone = None,
    smoothing: float = SMOOTHING,
) -> list[WoeBins]:
    """:func:`woe_bins` of every feature of ``mapper``, from counts ``(features,
    mapper.n_slots)`` over its bin codes (as :func:`bin_counts` returns them; a feature's
    slots past its last value bin are always empty and dropped)."""
    e = _counts(events, "events")
    ne = _counts(non_events, "non_events")
    shape = (mapper.n_features, mapper.n_slots)
    if e.shape != shape or ne.shape != shape:
        raise InputError(f"counts must have shape {shape} for this bin mapper")
    out = []
    for f, cuts in enumerate(mapper.edges):
        keep = np.r_[np.arange(cuts.size + 1), mapper.missing_bin]
        if e[f].sum() - e[f, keep].sum() or ne[f].sum() - ne[f, keep].sum():
            raise InputError(f"feature {f} has counts in bins its edges do not make")
        out.append(woe_bins(e[f, keep], ne[f, keep], cuts, monotone=monotone, smoothing=smoothing))
    return out


def select_by_iv(iv: Any, *, threshold: float | None = None, top_k: int | None = None) -> I64:
    """Indices of the features kept, in their original order: IV at least ``threshold``,
    and/or among the ``top_k`` largest (ties broken by the lower index); both may be given."""
    values = np.asarray(iv, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(values)):
        raise InputError("information values must be finite")
    keep = np.ones(values.size, dtype=np.bool_)
    if threshold is not None:
        keep &= values >= threshold
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise InputError(f"top_k must be a non-negative integer, got {top_k!r}")
        best = np.argsort(-values, kind="stable")[:top_k]
        top = np.zeros(values.size, dtype=np.bool_)
        top[best] = True
        keep &= top
    return np.flatnonzero(keep).astype(np.int64)


def _labels(labels: Any) -> I64:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise InputError("labels must be a non-empty 1-D array")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise InputError("labels must be 0 or 1")
    if not np.all((y == 0) | (y == 1)):
        raise InputError("labels must be 0 (non-event) or 1 (event)")
    return y.astype(np.int64)


def _counts(values: Any, name: str) -> I64:
    """Counts as int64 (exact integers, never negative: a decryption gone wrong is refused)."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise InputError(f"{name} must be integer counts")
    elif arr.dtype.kind not in "iu":
        raise InputError(f"{name} must be integer counts")
    if np.any(arr < 0):
        raise InputError(f"{name} must be non-negative")
    return arr.astype(np.int64)


def _merged(e: I64, ne: I64, cuts: F64, groups: list[int], smoothing: float) -> WoeBins:
    """Counts summed by ``groups`` (the first value bin of each merged bin, ascending)."""
    n_value = cuts.size + 1
    starts = np.asarray(groups, dtype=np.int64)
    me = np.r_[np.add.reduceat(e[:n_value], starts), e[-1]]
    mne = np.r_[np.add.reduceat(ne[:n_value], starts), ne[-1]]
    woe, terms = woe_iv(me, mne, smoothing=smoothing)
    bin_of = np.r_[np.searchsorted(starts, np.arange(n_value), side="right") - 1, starts.size]
    return WoeBins(
        events=me,
        non_events=mne,
        woe=woe,
        iv_terms=terms,
        edges=np.asarray(cuts[starts[1:] - 1]),
        bin_of=bin_of.astype(np.int64),
    )


def _monotone_groups(e: I64, ne: I64, increasing: bool, smoothing: float) -> list[int]:
    """Starts of merged value bins whose WOE is monotone: merge the leftmost adjacent pair
    that breaks the order until none does (at most one merge per value bin)."""
    n_value = e.size - 1
    starts = list(range(n_value))
    total_e, total_ne = int(e.sum()), int(ne.sum())
    while len(starts) > 1:
        bounds = [*starts, n_value]
        me = np.array([e[a:b].sum() for a, b in itertools.pairwise(bounds)])
        mne = np.array([ne[a:b].sum() for a, b in itertools.pairwise(bounds)])
        # The missing bin's counts are in the totals, not in the order.
        woe, _ = woe_iv(
            np.r_[me, total_e - me.sum()], np.r_[mne, total_ne - mne.sum()], smoothing=smoothing
        )
        value = woe[:-1]
        step = np.diff(value)
        bad = np.flatnonzero(step < 0) if increasing else np.flatnonzero(step > 0)
        if bad.size == 0:
            break
        del starts[int(bad[0]) + 1]
    return starts
