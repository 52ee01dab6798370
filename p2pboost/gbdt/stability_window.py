"""Population stability over a sliding window of the latest values (an online monitor).

Why: a batch PSI (:mod:`p2pboost.gbdt.stability`) answers "has this month's population
moved?"; an online predictor wants the same question answered continuously, over its last
``size`` requests. :class:`StabilityWindow` keeps the bin codes of the latest values in a ring
buffer and their counts per bin, so feeding a batch costs one ``searchsorted`` and two
``bincount`` calls, and reading the PSI costs one pass over the bins, whatever the window's
size. It knows nothing of the network: a predictor feeds it the scores it has just computed
(the guest) or the feature values it has just answered for (a host, its own features).

Bins are fixed when the window is made: the training scores' cut points
(:func:`~p2pboost.gbdt.stability.score_edges`) and their counts per bin, so the window's PSI
is exactly :func:`~p2pboost.gbdt.stability.psi` of the training counts and the window's counts.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.stability import EPSILON, band, psi, score_counts, score_edges

__all__ = ["StabilityWindow"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class StabilityWindow:
    """PSI of the latest ``size`` values against fixed bins (``edges``) and the training
    sample's ``expected`` counts per bin (``len(edges) + 1`` of them).

    ``min_rows``: below this many values in the window :meth:`psi` is None (a PSI over a few
    rows is noise, and would raise alarms at every start).
    """

    def __init__(
        self,
        edges: Any,
        expected: Any,
        *,
        size: int = 10_000,
        min_rows: int = 100,
        epsilon: float = EPSILON,
    ) -> None:
        cuts = np.asarray(edges, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) <= 0):
            raise InputError("edges must be finite and increasing")
        counts = np.asarray(expected, dtype=np.int64).reshape(-1)
        if counts.size != cuts.size + 1 or np.any(counts < 0) or counts.sum() == 0:
            raise InputError(f"expected must hold {cuts.size + 1} non-negative counts, not all 0")
        for name, value in (("size", size), ("min_rows", min_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        self.edges = cuts
        self.expected = counts
        self.size = size
        self.min_rows = min_rows
        self.epsilon = epsilon
        self._codes = np.zeros(size, dtype=np.int64)
        self._counts = np.zeros(counts.size, dtype=np.int64)
        self._next = 0  # where the next value goes in the ring
        self._rows = 0

    @classmethod
    def from_scores(cls, scores: Any, n_bins: int = 10, **kwargs: Any) -> StabilityWindow:
        """A window on the training ``scores``' quantile bins (deciles by default)."""
        edges = score_edges(scores, n_bins)
        return cls(edges, score_counts(scores, edges), **kwargs)

    @property
    def rows(self) -> int:
        """Values in the window now (at most ``size``)."""
        return self._rows

    def counts(self) -> I64:
        """The window's values per bin."""
        return self._counts.copy()

    def add(self, values: Any) -> None:
        """Feed the latest values (any number; the oldest leave the window)."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(v)):
            raise InputError("values must be finite")
        codes = np.searchsorted(self.edges, v[-self.size :], side="left").astype(np.int64)
        n = codes.size
        slots = (self._next + np.arange(n)) % self.size
        # Until the ring is first full the values sit in slots [0, rows) (the next slot is
        # ``rows``); after that in every slot. Either way the slots now written that lie below
        # ``rows`` hold the oldest values, which leave.
        old = slots[slots < self._rows]
        self._counts -= np.bincount(self._codes[old], minlength=self._counts.size)
        self._codes[slots] = codes
        self._counts += np.bincount(codes, minlength=self._counts.size)
        self._next = int((self._next + n) % self.size)
        self._rows = min(self.size, self._rows + n)

    def psi(self) -> float | None:
        """PSI of the window against the training counts (None below ``min_rows``)."""
        if self._rows < self.min_rows:
            return None
        return float(psi(self.expected, self._counts, epsilon=self.epsilon))

    def snapshot(self) -> dict[str, Any]:
        """``{"rows", "psi", "band"}`` of now (psi and band None below ``min_rows``)."""
        value = self.psi()
        reading: Literal["stable", "watch", "shift"] | None = None if value is None else band(value)
        return {"rows": self._rows, "psi": value, "band": reading}
