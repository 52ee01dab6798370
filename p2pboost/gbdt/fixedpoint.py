"""Exact gradient arithmetic: put g and h on a power-of-two grid so every sum is exact.

Why: SecureBoost is *lossless* only if the federated histograms (sums of fixed-point integers,
computed under Paillier) equal the plaintext core's histograms bit for bit. Floating-point sums
depend on the order of addition, so two features that split a node into the same two sets could
get gains that differ in the last bit, and the federated and plaintext trees could break that tie
differently. We avoid the problem at its root: before a tree is grown, g and h are rounded to
multiples of ``2**-bits``, with ``bits`` chosen so that the sum of any subset of the ``n`` values
has magnitude below ``2**(53 - bits)``. Every such sum is then an integer multiple of
``2**-bits`` below ``2**53`` ulps, which float64 represents exactly; so

* the plaintext histogram (``np.bincount`` in float64) is exact whatever the order,
* histogram subtraction (parent - child) equals the directly built sibling exactly,
* the integers ``round(x * 2**bits)`` (int64) summed under encryption decode to the same floats.

The rounding error is at most ``2**-(bits+1)``, i.e. about ``2**-35`` of the largest gradient for
150,000 rows: far below float32 precision, which XGBoost uses for its gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Grid", "choose_grid", "from_fixed", "quantize", "to_fixed"]

#: float64 carries 53 significant bits; one is kept in reserve so sums never touch the edge.
_MANTISSA_BITS = 53
_RESERVE_BITS = 1


@dataclass(frozen=True, slots=True)
class Grid:
    """A power-of-two fixed-point grid: values are integers times ``2**-bits``.

    ``magnitude_bits`` bounds every value: ``|x| <= 2**magnitude_bits``. ``max_rows`` is the
    largest number of values whose sum is still exact, and ``sum_bits`` bounds that sum's
    integer form: ``|sum(round(x * 2**bits))| < 2**sum_bits`` (at most 52).
    """

    bits: int
    magnitude_bits: int
    max_rows: int

    @property
    def sum_bits(self) -> int:
        return _MANTISSA_BITS - _RESERVE_BITS

    @property
    def value_bits(self) -> int:
        """Bits of one value's integer form: ``|round(x * 2**bits)| <= 2**value_bits``."""
        return self.bits + self.magnitude_bits


def choose_grid(values: npt.NDArray[np.float64], n_rows: int) -> Grid:
    """Choose the finest grid on which sums of up to ``n_rows`` of ``values`` are exact.

    ``values`` is any array of the numbers to be summed (g or h, any shape). Raises
    ``ValueError`` for non-finite values or ``n_rows < 1``.
    """
    if n_rows < 1:
        raise ValueError("n_rows must be at least 1")
    arr = np.asarray(values, dtype=np.float64)
    # max/min instead of abs/isfinite passes: NaN and infinities propagate into them.
    largest = max(float(arr.max()), -float(arr.min())) if arr.size else 0.0
    if not math.isfinite(largest):
        raise ValueError("gradients and hessians must be finite")
    magnitude_bits = math.frexp(largest)[1] if largest > 0.0 else 0  # largest <= 2**exp
    row_bits = max(0, math.ceil(math.log2(n_rows)))
    bits = _MANTISSA_BITS - _RESERVE_BITS - row_bits - magnitude_bits
    return Grid(bits=bits, magnitude_bits=magnitude_bits, max_rows=n_rows)


def quantize(values: npt.NDArray[np.float64], grid: Grid) -> npt.NDArray[np.float64]:
    """Round ``values`` to the nearest multiple of ``2**-grid.bits`` (ties to even)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        return np.ldexp(np.rint(np.ldexp(arr, grid.bits)), -grid.bits)
    out = np.ldexp(arr, grid.bits)  # then in place: no further temporaries on the hot path
    np.rint(out, out=out)
    return np.ldexp(out, -grid.bits, out=out)


def to_fixed(values: npt.NDArray[np.float64], grid: Grid) -> npt.NDArray[np.int64]:
    """Integer form of on-grid (or not yet rounded) values: ``round(x * 2**bits)`` as int64."""
    arr = np.asarray(values, dtype=np.float64)
    return np.rint(np.ldexp(arr, grid.bits)).astype(np.int64)


def from_fixed(values: npt.NDArray[np.int64] | int, grid: Grid) -> npt.NDArray[np.float64]:
    """Float form of integer sums: exact for any sum of at most ``grid.max_rows`` values."""
    return np.ldexp(np.asarray(values, dtype=np.float64), -grid.bits)
