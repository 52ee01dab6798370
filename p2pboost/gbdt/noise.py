"""Randomness and noise for differential privacy, done so the guarantee survives floating point.

Three choices, each with its reason (docs/explanation/differential-privacy.md has the long form):

* **A cryptographic source.** A DP guarantee assumes the noise is unpredictable to whoever
  reads the model. A simulation generator (``numpy``'s PCG64, Mersenne Twister) is not: its
  state can be recovered from its outputs, and then the noise can be subtracted. Every draw
  here comes from a SHAKE-256 stream (an extendable-output function) keyed by 32 bytes from
  ``os.urandom``. Tests may give a ``seed`` instead: the stream is then derived from it, runs
  repeat exactly (a federated run can be compared with the core's), and the model's privacy
  record says the noise was seeded.
* **Laplace by Mironov's snapping mechanism** (CCS 2012). Textbook Laplace in floating point
  (``f + scale * log(u)``) leaks: the set of doubles it can output depends on ``f``, so some
  outputs identify the input exactly. Snapping clamps, adds the noise, rounds to a grid of
  ``Lambda`` (the smallest power of two >= the scale) and clamps again; with the uniform draw
  able to take *every* double in (0, 1], the result is ``eps * (1 + 2**-49 * B / Delta)``-DP
  (``B`` the clamp bound), which :func:`snapping_epsilon` states.
* **The exponential mechanism by Gumbel-max.** Sampling ``argmax(score + Gumbel)`` picks each
  candidate with probability proportional to ``exp(score)`` without ever computing ``exp`` (no
  overflow for large gains, no underflow to an all-zero distribution).
"""

from __future__ import annotations

import hashlib
import math
import os

import numpy as np
import numpy.typing as npt

__all__ = [
    "NoiseSource",
    "exponential_mechanism",
    "snapped_laplace",
    "snapping_epsilon",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


class NoiseSource:
    """A stream of random 64-bit words: SHAKE-256 of (key, label, block counter).

    ``seed=None`` (the default) keys it with ``os.urandom``; an integer seed derives the key
    (tests and comparisons only: anyone who knows the seed knows the noise). ``label`` separates
    independent streams of one seed (the mechanisms' noise, the rows' assignment to trees).
    """

    def __init__(self, seed: int | None = None, label: str = "mechanisms") -> None:
        if seed is None:
            key = os.urandom(32)
        else:
            key = hashlib.sha256(f"p2pboost.dp.seed:{int(seed)}".encode()).digest()
        self.seeded = seed is not None
        self._key = key + b"|" + label.encode()
        self._block = 0

    def words(self, n: int) -> U64:
        """``n`` independent uniform 64-bit words."""
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        xof = hashlib.shake_256(self._key + self._block.to_bytes(8, "big"))
        self._block += 1
        return np.frombuffer(xof.digest(8 * n), dtype="<u8").astype(np.uint64)

    def uniform(self, shape: int | tuple[int, ...]) -> F64:
        """Uniform doubles in the open interval (0, 1), on the grid ``(k + 1/2) * 2**-53``."""
        size = int(np.prod(shape))
        w = self.words(size) >> np.uint64(11)
        return np.asarray(((w.astype(np.float64) + 0.5) * 2.0**-53).reshape(shape))

    def uniform_doubles(self, n: int) -> F64:
        """Uniform draws from (0, 1] that can be *any* double there, each binade with its
        probability (the draw Mironov's proof needs; :meth:`uniform` is on a coarse grid).

        The exponent counts the leading zero bits of a random bit stream (geometric), the 52
        mantissa bits are uniform.
        """
        mantissa = self.words(n) >> np.uint64(12)
        exponent = np.ones(n, dtype=np.int64)
        pending = np.arange(n)
        while pending.size:
            w = self.words(pending.size)
            zeros = _leading_zeros(w)
            exponent[pending] += zeros
            pending = pending[zeros == 64]  # all 64 bits zero: keep counting
        frac = 1.0 + mantissa.astype(np.float64) * 2.0**-52  # exact: 52-bit integers
        return np.asarray(np.ldexp(frac, -exponent))

    def signs(self, n: int) -> F64:
        """``n`` independent fair signs (+1.0 / -1.0)."""
        return np.where(self.words(n) >> np.uint64(63), -1.0, 1.0)


def _leading_zeros(w: U64) -> I64:
    """Leading zero bits of 64-bit words (64 for 0), exactly (no rounding through floats of
    more than 32 bits)."""
    hi = (w >> np.uint64(32)).astype(np.float64)
    lo = (w & np.uint64(0xFFFFFFFF)).astype(np.float64)
    hi_len = np.frexp(hi)[1].astype(np.int64)  # bit length; 0 for 0
    lo_len = np.frexp(lo)[1].astype(np.int64)
    return np.asarray(np.where(hi_len > 0, 32 - hi_len, 64 - lo_len), dtype=np.int64)


def exponential_mechanism(scores: F64, source: NoiseSource) -> I64:
    """Row-wise exponential mechanism: index ``j`` of row ``i`` with probability proportional
    to ``exp(scores[i, j])``; ``-inf`` marks a candidate that does not exist.

    Gumbel-max: ``argmax(scores + G)`` with ``G = -log(-log(u))`` i.i.d. standard Gumbel. One
    draw per entry of ``scores`` in C order, so two parties drawing over the same candidates in
    the same order choose the same. A row without candidates gives -1.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError("scores must be a (rows, candidates) array")
    gumbel = -np.log(-np.log(source.uniform(s.shape)))
    keyed = s + gumbel
    best = np.argmax(keyed, axis=1) if s.shape[1] else np.zeros(s.shape[0], dtype=np.int64)
    none = ~np.isfinite(s).any(axis=1) if s.shape[1] else np.ones(s.shape[0], dtype=np.bool_)
    return np.asarray(np.where(none, -1, best), dtype=np.int64)


def _snap_bound(bound: float, scale: float) -> float:
    """The clamp bound ``B`` of the snapping mechanism: at least ``bound`` (so the true values
    are never clamped) and above the noise scale, as Mironov's theorem asks (``scale < B``)."""
    return max(float(bound), 2.0 * float(scale))


def snapping_epsilon(epsilon: float, sensitivity: float, bound: float) -> float:
    """The guarantee of :func:`snapped_laplace` at nominal ``epsilon``:
    ``epsilon * (1 + 2**-49 * B / sensitivity)`` (Mironov 2012, Theorem 1, in units of the
    sensitivity), ``B`` the clamp bound actually used."""
    scale = sensitivity / epsilon
    b = _snap_bound(bound, scale)
    return float(epsilon * (1.0 + 2.0**-49 * b / sensitivity))


def snapped_laplace(
    values: F64, sensitivity: float, epsilon: float, bound: float, source: NoiseSource
) -> F64:
    """``values`` with Laplace noise of scale ``sensitivity / epsilon``, by the snapping
    mechanism: ``clamp_B(round_Lambda(clamp_B(v) + S * scale * ln U))``.

    ``bound`` bounds ``|values|`` (they are clamped to it first; the output is clamped to
    ``B = max(bound, 2 * scale)``, as the theorem asks, and then to ``bound``: post-processing
    that removes noise no true value could carry); ``Lambda`` is the smallest power of two >=
    the scale. The arithmetic is in units of ``sensitivity`` (so the theorem's sensitivity is
    1) and scaled back at the end, which is post-processing.
    """
    if not (sensitivity > 0 and epsilon > 0 and bound > 0):
        raise ValueError("sensitivity, epsilon and bound must be positive")
    v = np.asarray(values, dtype=np.float64)
    flat = v.reshape(-1) / sensitivity
    scale = 1.0 / epsilon  # in units of the sensitivity
    b = _snap_bound(bound / sensitivity, scale)
    k = math.ceil(math.log2(scale))
    if 2.0**k < scale:  # guard the float log at a power of two
        k += 1
    u = source.uniform_doubles(flat.size)
    s = source.signs(flat.size)
    noisy = np.clip(flat, -b, b) + s * scale * np.log(u)
    snapped = np.ldexp(np.rint(np.ldexp(noisy, -k)), k)  # nearest multiple of Lambda = 2**k
    # Mironov's output clamp at B, then at the values' own bound: clamping a private output
    # is post-processing (it costs no privacy) and removes noise no true value could carry.
    top = min(b, bound / sensitivity)
    out = np.clip(np.clip(snapped, -b, b), -top, top) * sensitivity
    return np.asarray(out.reshape(v.shape))
