"""Row and column sampling: plain subsampling, GOSS and per-tree feature subsets.

All randomness comes from the ``numpy.random.Generator`` passed in (seeded once per training
run), so the same seed gives the same samples and the same model.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["column_sample", "goss_sample", "row_sample", "sample_from"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]


def row_sample(rng: np.random.Generator, n_rows: int, rate: float) -> I64 | None:
    """Sorted indices of ``rate * n_rows`` rows drawn without replacement (``None``: all)."""
    if rate >= 1.0:
        return None
    size = max(1, round(rate * n_rows))
    return np.sort(rng.choice(n_rows, size=size, replace=False)).astype(np.int64)


def goss_sample(
    rng: np.random.Generator, grad: F64, top_rate: float, other_rate: float
) -> tuple[I64, F64]:
    """Gradient-based one-side sampling (LightGBM): rows and per-row gradient multipliers.

    Keeps the ``top_rate`` share of rows with the largest ``|g|`` (summed over outputs) and a
    random ``other_rate`` share of the rest, whose gradients and hessians are scaled by
    ``(1 - top_rate) / other_rate`` so the sums stay unbiased. Ties in ``|g|`` are broken by
    row index (stable sort), keeping the sample deterministic.
    """
    n = grad.shape[0]
    n_top = max(1, round(top_rate * n))
    n_other = min(n - n_top, max(1, round(other_rate * n)))
    order = np.argsort(-np.abs(grad).sum(axis=1), kind="stable")
    top = order[:n_top]
    rest = order[n_top:]
    other = rng.choice(rest, size=n_other, replace=False) if n_other > 0 else rest[:0]
    rows = np.concatenate([top, other])
    scale = np.ones(n)
    scale[other] = (1.0 - top_rate) / other_rate
    return np.sort(rows).astype(np.int64), scale


def column_sample(rng: np.random.Generator, n_features: int, rate: float) -> B8:
    """Mask of the features a tree may split on (at least one)."""
    mask = np.ones(n_features, dtype=np.bool_)
    if rate >= 1.0:
        return mask
    size = max(1, round(rate * n_features))
    mask[:] = False
    mask[rng.choice(n_features, size=size, replace=False)] = True
    return mask


def sample_from(rng: np.random.Generator, mask: B8, rate: float) -> B8:
    """A ``rate`` share of the features in ``mask`` (at least one; XGBoost's
    ``colsample_bylevel`` and ``colsample_bynode`` draw so from the tree's, then the level's,
    features). ``rate >= 1`` or an empty mask: ``mask`` itself, and nothing is drawn."""
    chosen = np.flatnonzero(mask)
    if rate >= 1.0 or chosen.size == 0:
        return mask
    size = max(1, round(rate * chosen.size))
    out = np.zeros_like(mask)
    out[rng.choice(chosen, size=size, replace=False)] = True
    return out
