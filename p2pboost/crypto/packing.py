"""Fixed-point encoding and GH packing (SecureBoost+, Algorithms 3, 6, 7 and 8).

One Paillier plaintext has about 2048 bits; one gradient needs about 53. SecureBoost+ (Chen et
al., 2021) therefore packs a row's g and h into one integer, ``(g + offset) << w_h | h``, so one
encryption, one ciphertext addition and one decryption serve both; with k outputs (multi-class,
Alg. 7) the 2k values of a row go into as few plaintexts as fit.

The packed slots must never overflow into each other, however the rows are summed. A slot holds
the *sum* over a set of at most ``n_rows`` rows of ``value + offset``, where the offset makes
every addend non-negative (Alg. 3: negative gradients). With ``|value| <= bound`` and
``offset = bound`` every addend is in ``[0, 2*bound]``, so a slot needs
``(n_rows * 2 * bound).bit_length()`` bits (SecureBoost+ eq. 12 in integer form). Unpacking a
sum over ``count`` rows subtracts ``count * offset`` (Alg. 6/8): the guest needs the count of
each histogram bin, which the host sends with every split-info.

Two ways to get integers:

* **grid** (what p2pboost uses): :mod:`p2pboost.gbdt.fixedpoint` already put g and h on
  power-of-two grids, so their integer forms ``to_fixed(x, grid)`` are int64 with
  ``|x| <= 2**grid.value_bits`` and every subset sum decodes to the plaintext core's float
  *exactly*. :meth:`PackingSpec.for_grids` takes the two :class:`Grid` objects.
* **precision** (the paper's encoding): ``round(x * 2**r)`` for a bound ``|x| <= x_max`` and
  precision ``r`` (default 53 bits), :meth:`PackingSpec.for_precision` and
  :func:`encode_precision`. Integer sums are exact; their float form is rounded once.

Everything here is pure: numbers in, numbers out; no keys, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import CryptoError, InputError
from p2pboost.gbdt.fixedpoint import Grid

__all__ = [
    "DEFAULT_PRECISION",
    "Component",
    "PackingSpec",
    "Slot",
    "encode_precision",
    "pack",
    "unpack_sums",
]

#: Default fixed-point precision ``r`` of the paper's float encoding (bits after the point).
DEFAULT_PRECISION = 53

_INT64_MAX = (1 << 63) - 1


def _budget(key_bits: int | None, plaintext_bits: int | None) -> int:
    """Plaintext bits from exactly one of a Paillier key size or a key's own budget."""
    if (key_bits is None) == (plaintext_bits is None):
        raise InputError("give exactly one of key_bits and plaintext_bits")
    return plaintext_bits if plaintext_bits is not None else int(key_bits) - 1  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Component:
    """One kind of value in a row (g or h): integer bound, offset, and float scale.

    ``bound`` bounds the integer form ``|v| <= bound``; ``offset`` is ``bound`` for signed
    values and 0 for non-negative ones; a value's float is ``v * 2**-scale_bits``.
    """

    bound: int
    offset: int
    scale_bits: int

    def slot_width(self, n_rows: int) -> int:
        """Bits for a sum of up to ``n_rows`` addends ``v + offset`` in ``[0, bound + offset]``."""
        return max(1, (n_rows * (self.bound + self.offset)).bit_length())


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one output's g or h sits in a plaintext: ``(plaintext >> shift) & (2**width - 1)``."""

    output: int
    is_hessian: bool
    shift: int
    width: int


@dataclass(frozen=True, slots=True)
class PackingSpec:
    """How rows of g/h (``n_outputs`` each) are packed into plaintexts of ``plaintext_bits``.

    ``layout[p]`` lists the slots of plaintext ``p`` of a row; most tasks need one plaintext per
    row. ``row_bits[p]`` is the width plaintext ``p`` uses; it is also the width one split-info
    takes when compressed (:attr:`split_infos_per_plaintext`).
    """

    n_rows: int
    n_outputs: int
    plaintext_bits: int
    g: Component
    h: Component
    layout: tuple[tuple[Slot, ...], ...]

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        n_rows: int,
        g: Component,
        h: Component,
        *,
        n_outputs: int = 1,
        plaintext_bits: int,
    ) -> PackingSpec:
        """Lay out ``2 * n_outputs`` slots (g before h for each output) greedily into plaintexts."""
        if n_rows < 1 or n_outputs < 1:
            raise InputError("n_rows and n_outputs must be at least 1")
        wg, wh = g.slot_width(n_rows), h.slot_width(n_rows)
        if max(wg, wh) > plaintext_bits:
            raise InputError(f"a {max(wg, wh)}-bit slot does not fit a {plaintext_bits}-bit key")
        layout: list[tuple[Slot, ...]] = []
        current: list[tuple[int, bool, int]] = []
        used = 0
        for k in range(n_outputs):
            for is_h, width in ((False, wg), (True, wh)):
                if used + width > plaintext_bits:
                    layout.append(_place(current))
                    current, used = [], 0
                current.append((k, is_h, width))
                used += width
        layout.append(_place(current))
        return cls(n_rows, n_outputs, plaintext_bits, g, h, tuple(layout))

    @classmethod
    def for_grids(
        cls,
        n_rows: int,
        g_grid: Grid,
        h_grid: Grid,
        *,
        key_bits: int | None = None,
        plaintext_bits: int | None = None,
        n_outputs: int = 1,
        h_nonnegative: bool = True,
    ) -> PackingSpec:
        """Spec for integer forms ``to_fixed(g, g_grid)`` and ``to_fixed(h, h_grid)``.

        The plaintext budget is ``plaintext_bits`` (a key's own: 2047 for 2048-bit Paillier, 681
        for 2048-bit OU) or, for Paillier, ``key_bits - 1``. ``h_nonnegative`` (true for every
        convex loss p2pboost ships) saves the h offset; pass False for an objective whose
        hessians can be negative.
        """
        budget = _budget(key_bits, plaintext_bits)
        for grid in (g_grid, h_grid):
            if n_rows > grid.max_rows:
                raise InputError(f"grid is exact for {grid.max_rows} rows, not {n_rows}")
        gb = 1 << max(g_grid.value_bits, 0)
        hb = 1 << max(h_grid.value_bits, 0)
        g = Component(gb, gb, g_grid.bits)
        h = Component(hb, 0 if h_nonnegative else hb, h_grid.bits)
        return cls.build(n_rows, g, h, n_outputs=n_outputs, plaintext_bits=budget)

    @classmethod
    def for_precision(
        cls,
        n_rows: int,
        *,
        key_bits: int,
        g_max: float = 1.0,
        h_max: float = 1.0,
        precision: int = DEFAULT_PRECISION,
        n_outputs: int = 1,
        h_nonnegative: bool = True,
    ) -> PackingSpec:
        """The paper's encoding: ``round(x * 2**precision)`` for ``|g| <= g_max``, ``|h| <= h_max``.

        With logistic loss ``|g| <= 1`` and ``0 <= h <= 1/4``.
        """
        if precision < 0 or not (g_max > 0 and h_max > 0):
            raise InputError("precision must be >= 0 and the bounds positive")
        gb = math.ceil(math.ldexp(g_max, precision))
        hb = math.ceil(math.ldexp(h_max, precision))
        g = Component(gb, gb, precision)
        h = Component(hb, 0 if h_nonnegative else hb, precision)
        return cls.build(n_rows, g, h, n_outputs=n_outputs, plaintext_bits=key_bits - 1)

    # --- derived sizes -------------------------------------------------------------------------
    @property
    def plaintexts_per_row(self) -> int:
        return len(self.layout)

    @property
    def row_bits(self) -> tuple[int, ...]:
        """Bits used by each plaintext of a row (= width of its sums)."""
        return tuple(sum(s.width for s in slots) for slots in self.layout)

    @property
    def split_infos_per_plaintext(self) -> int:
        """Compress capacity (Alg. 4): ``floor(plaintext_bits / packed bits)``, one-plaintext rows.

        For rows of several plaintexts, the number of *whole split-infos* per decryption.
        """
        return int(self.plaintext_bits // sum(self.row_bits))

    @property
    def sum_fits_int64(self) -> bool:
        """Whether every unpacked sum fits int64 (always true for grid specs)."""
        return all(
            self.n_rows * c.bound <= _INT64_MAX and self.n_rows * c.offset <= _INT64_MAX
            for c in (self.g, self.h)
        )


def _place(items: list[tuple[int, bool, int]]) -> tuple[Slot, ...]:
    """Assign shifts so the first item sits in the highest bits (as in ``g << w_h | h``)."""
    slots = []
    shift = sum(w for _, _, w in items)
    for output, is_h, width in items:
        shift -= width
        slots.append(Slot(output, is_h, shift, width))
    return tuple(slots)


def encode_precision(values: npt.ArrayLike, spec: PackingSpec, *, hessian: bool) -> list[Any]:
    """Float to integer form for a :meth:`PackingSpec.for_precision` spec: ``round(x * 2**r)``.

    Returns Python ints (they may exceed int64 for large precisions) in an object array.
    """
    comp = spec.h if hessian else spec.g
    arr = np.asarray(values, dtype=np.float64)
    if arr.size and not np.all(np.isfinite(arr)):
        raise InputError("values must be finite")
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for i, x in enumerate(arr.reshape(-1).tolist()):
        flat[i] = round(math.ldexp(x, comp.scale_bits))
    return out  # type: ignore[return-value]


def pack(spec: PackingSpec, g: npt.ArrayLike, h: npt.ArrayLike) -> list[list[int]]:
    """Pack rows of integer-form g and h into plaintexts: ``planes[p][row]``.

    ``g`` and ``h`` have shape ``(rows,)`` or ``(rows, n_outputs)``, integer dtype (int64 from
    ``to_fixed``) or, for precision specs, object arrays of Python ints. Values outside
    ``[-bound, bound]`` (or negative hessians when ``h`` has no offset) raise
    :class:`InputError`, since they could overflow a slot.
    """
    cols: dict[tuple[int, bool], list[int]] = {}
    for name, values, comp, is_h in (("g", g, spec.g, False), ("h", h, spec.h, True)):
        arr = np.asarray(values)
        mat = arr[:, None] if arr.ndim == 1 else arr
        if mat.ndim != 2 or mat.shape[1] != spec.n_outputs:
            raise InputError(f"{name} must have shape (rows,) or (rows, {spec.n_outputs})")
        if mat.dtype != object and mat.dtype.kind not in "iu":
            raise InputError(f"{name} must hold integers (use to_fixed or encode_precision)")
        lo, hi = -comp.offset, comp.bound
        if mat.size and (int(mat.min()) < lo or int(mat.max()) > hi):
            raise InputError(f"{name} values outside [{lo}, {hi}]: they could overflow a slot")
        off = comp.offset
        for k in range(spec.n_outputs):
            cols[(k, is_h)] = [int(v) + off for v in mat[:, k].tolist()]
    n = len(cols[(0, False)])
    if len(cols[(0, True)]) != n:
        raise InputError("g and h must have the same number of rows")
    if n > spec.n_rows:
        raise InputError(f"{n} rows exceed the spec's budget of {spec.n_rows}")
    planes: list[list[int]] = []
    for slots in spec.layout:
        plane = [0] * n
        for slot in slots:
            column = cols[(slot.output, slot.is_hessian)]
            shift = slot.shift
            plane = [acc | (v << shift) for acc, v in zip(plane, column, strict=True)]
        planes.append(plane)
    return planes


def unpack_sums(
    spec: PackingSpec,
    plaintexts: Sequence[Sequence[int]],
    counts: npt.ArrayLike,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Recover exact integer sums of g and h from decrypted packed sums (Alg. 6/8).

    ``plaintexts[p][i]`` is the decrypted plaintext ``p`` of sum ``i`` over ``counts[i]`` rows.
    Returns ``(g_sums, h_sums)`` of shape ``(len(counts), n_outputs)``: int64 when
    :attr:`PackingSpec.sum_fits_int64`, else Python ints in object arrays. A slot whose value
    is impossible for its count (a corrupted or forged sum) raises :class:`CryptoError`.
    """
    cnt = np.asarray(counts)
    if cnt.ndim != 1 or cnt.dtype.kind not in "iu":
        raise InputError("counts must be a 1-d integer array")
    if len(plaintexts) != spec.plaintexts_per_row:
        raise InputError(f"expected {spec.plaintexts_per_row} plaintexts per sum")
    m = cnt.shape[0]
    if cnt.size and (cnt.min() < 0 or cnt.max() > spec.n_rows):
        raise CryptoError("a count is outside [0, n_rows]")
    count_list = [int(c) for c in cnt.tolist()]
    dtype: Any = np.int64 if spec.sum_fits_int64 else object
    g_out = np.zeros((m, spec.n_outputs), dtype=dtype)
    h_out = np.zeros((m, spec.n_outputs), dtype=dtype)
    for slots, plane, bits in zip(spec.layout, plaintexts, spec.row_bits, strict=True):
        if len(plane) != m:
            raise InputError("each plaintext plane needs one value per count")
        for value in plane:
            if not 0 <= value < (1 << bits):
                raise CryptoError("a packed sum has bits outside its slots")
        for slot in slots:
            comp = spec.h if slot.is_hessian else spec.g
            mask = (1 << slot.width) - 1
            out = h_out if slot.is_hessian else g_out
            values = []
            for value, c in zip(plane, count_list, strict=True):
                v = ((int(value) >> slot.shift) & mask) - c * comp.offset
                if not -c * comp.offset <= v <= c * comp.bound:
                    raise CryptoError("an unpacked sum is impossible for its count")
                values.append(v)
            out[:, slot.output] = values
    return g_out, h_out
