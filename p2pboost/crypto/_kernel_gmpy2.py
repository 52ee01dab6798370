"""The gmpy2 kernel: the reference implementation of every kernel, and the fallback.

Each function here has the semantics of the native kernel of the same name
(:mod:`p2pboost.crypto._native`) on gmpy2 integers, one interpreter call per modular product.
It runs wherever p2pboost installs (no compiler needed), and the tests compare the native
kernel against it. The callers are :mod:`p2pboost.crypto.kernels`, which has checked every
argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gmpy2  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
from gmpy2 import mpz

__all__ = ["divide", "horner", "multiply", "prefix_products", "segment_products"]

_ONE = mpz(1)
I64 = npt.NDArray[np.int64]


def multiply(mod: Any, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    return [x * y % mod for x, y in zip(a, b, strict=True)]


def segment_products(mod: Any, values: Sequence[Any], index: I64, offsets: I64) -> list[Any]:
    order = index.tolist()
    out = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        if a == b:
            out.append(_ONE)
            continue
        acc = values[order[a]]
        for i in order[a + 1 : b]:
            acc = acc * values[i] % mod
        out.append(acc)
    return out


def prefix_products(mod: Any, values: Sequence[Any], run: int) -> list[Any]:
    out = list(values)
    for start in range(0, len(out), run):
        acc = out[start]
        for i in range(start + 1, start + run):
            c = out[i]
            acc = out[i] = acc if c == _ONE else acc * c % mod  # an empty bin costs no product
    return out


def divide(mod: Any, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """``a[i] * b[i]**-1`` with one inversion (Montgomery's trick); ZeroDivisionError when a
    divisor has no inverse."""
    if not b:
        return []
    prefix = [b[0]]
    for v in b[1:]:
        prefix.append(prefix[-1] * v % mod)
    inv = gmpy2.invert(prefix[-1], mod)
    out = [_ONE] * len(b)
    for i in range(len(b) - 1, 0, -1):
        out[i] = inv * prefix[i - 1] % mod * a[i] % mod
        inv = inv * b[i] % mod
    out[0] = inv * a[0] % mod
    return out


def horner(mod: Any, values: Sequence[Any], shifts: I64, offsets: I64) -> list[Any]:
    sh = shifts.tolist()
    out = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        acc = values[a]
        for k in range(a + 1, b):
            acc = gmpy2.powmod(acc, 1 << sh[k], mod) * values[k] % mod
        out.append(acc)
    return out
