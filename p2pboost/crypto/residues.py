"""Ciphertexts as the kernels hold them: fixed-width big-endian bytes, or gmpy2 integers.

The native kernel (:mod:`p2pboost.crypto._native`) reads and writes contiguous fixed-width
blocks, the form ciphertexts have on the wire, so nothing is converted between the network and
the C loops. The gmpy2 kernel works on lists of :class:`gmpy2.mpz`. :class:`Residues` holds
either and converts lazily, once, when the other form is asked for: a host that keeps a
tree's ciphertexts for many histogram builds parses them once on the gmpy2 path and never on
the native one.

:func:`check_range` is the range check of ciphertexts from a peer (every value in
``(0, modulus)``), vectorised over 64-bit words so that it costs a few nanoseconds per
ciphertext: values outside that range never reach the kernels.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gmpy2 import mpz  # type: ignore[import-untyped]

from p2pboost.exceptions import CodecError, InputError

__all__ = ["Residues", "check_range"]

_ONE = mpz(1)


def _words(data: bytes | bytearray | memoryview, width: int) -> npt.NDArray[np.uint64]:
    """``data`` as rows of big-endian 64-bit words, left-padded to whole words."""
    raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, width)
    pad = -width % 8
    if pad:
        raw = np.concatenate([np.zeros((raw.shape[0], pad), dtype=np.uint8), raw], axis=1)
    return np.ascontiguousarray(raw).view(">u8").astype(np.uint64)


def check_range(data: bytes | bytearray | memoryview, width: int, modulus: int) -> None:
    """Raise :class:`CodecError` unless ``data`` is whole ``width``-byte blocks, each a
    big-endian value in ``(0, modulus)``.

    Lexicographic comparison of 64-bit words: the first word where a value differs from the
    modulus decides; a value equal to it, or zero, is out of range.
    """
    if width <= 0 or len(data) % width:
        raise CodecError("ciphertext bytes are not whole blocks of the key's width")
    if not data:
        return
    if modulus.bit_length() > 8 * width:
        raise CodecError("ciphertext block narrower than the modulus")
    rows = _words(data, width)
    mod = _words(modulus.to_bytes(width, "big"), width)[0]
    diff = rows != mod
    first = diff.argmax(axis=1)
    picked = rows[np.arange(rows.shape[0]), first]
    below = diff.any(axis=1) & (picked < mod[first])
    if not bool(below.all()) or not bool(rows.any(axis=1).all()):
        raise CodecError("ciphertext outside (0, modulus)")


class Residues:
    """``count`` residues of one modulus, each ``width`` bytes big-endian on the bytes side.

    Build with :meth:`of_bytes` (trusted bytes: our own output, or checked with
    :func:`check_range`) or :meth:`of_values` (gmpy2 integers). :attr:`data` and
    :attr:`values` give either form, converting once and caching. The selection helpers
    (:meth:`take`, :meth:`concat`, :meth:`replace`, :meth:`ones`) work in whichever form is at
    hand, so a chain of gmpy2 kernels never serialises and a chain of native ones never parses.
    """

    __slots__ = ("_data", "_values", "count", "width")

    def __init__(self, width: int, data: bytes | None, values: list[Any] | None) -> None:
        if width <= 0:
            raise InputError("residue width must be positive")
        self.width = width
        self._data = data
        self._values = values
        if data is not None:
            if len(data) % width:
                raise InputError("residue bytes are not whole blocks of their width")
            self.count = len(data) // width
        elif values is not None:
            self.count = len(values)
        else:
            raise InputError("residues need bytes or values")

    @classmethod
    def of_bytes(cls, data: bytes, width: int) -> Residues:
        return cls(width, bytes(data), None)

    @classmethod
    def of_values(cls, values: Sequence[Any], width: int) -> Residues:
        return cls(width, None, list(values))

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Residues(count={self.count}, width={self.width})"

    def __eq__(self, other: object) -> bool:
        """Equal residues in the same order (whichever forms either holds)."""
        if not isinstance(other, Residues):
            return NotImplemented
        if self.width != other.width or self.count != other.count:
            return False
        if self._values is not None and other._values is not None:
            return bool(self._values == other._values)
        return self.data == other.data

    __hash__ = None  # type: ignore[assignment]  # mutable caches: not hashable

    @property
    def data(self) -> bytes:
        """The residues as one bytes object (serialised on first use)."""
        if self._data is None:
            w = self.width
            assert self._values is not None
            self._data = b"".join(int(v).to_bytes(w, "big") for v in self._values)
        return self._data

    @property
    def values(self) -> list[Any]:
        """The residues as gmpy2 integers (parsed on first use)."""
        if self._values is None:
            data, w = self.data, self.width
            from_bytes = mpz.from_bytes
            self._values = [from_bytes(data[i : i + w], "big") for i in range(0, len(data), w)]
        return self._values

    def _rows(self) -> npt.NDArray[np.uint8]:
        return np.frombuffer(self.data, dtype=np.uint8).reshape(self.count, self.width)

    def take(self, index: npt.ArrayLike) -> Residues:
        """The residues at ``index`` (in that order)."""
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.count):
            raise InputError("residue index out of range")
        if self._data is not None or self._values is None:
            return Residues(self.width, self._rows()[idx].tobytes(), None)
        vals = self._values
        return Residues(self.width, None, [vals[i] for i in idx.tolist()])

    @staticmethod
    def concat(parts: Sequence[Residues], width: int) -> Residues:
        """The residues of ``parts`` one after another."""
        if any(p.width != width for p in parts):
            raise InputError("residues of different widths")
        if parts and all(p._values is not None for p in parts):
            return Residues(width, None, [v for p in parts for v in p.values])
        return Residues(width, b"".join(p.data for p in parts), None)

    def replace(self, index: npt.ArrayLike, other: Residues) -> Residues:
        """A copy with the residues at ``index`` replaced by ``other``'s, in order."""
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if idx.size != other.count or other.width != self.width:
            raise InputError("replacement does not match its positions")
        if self._data is not None and (other._data is not None or other._values is None):
            rows = self._rows().copy()
            rows[idx] = np.frombuffer(other.data, dtype=np.uint8).reshape(-1, self.width)
            return Residues(self.width, rows.tobytes(), None)
        vals = list(self.values)
        for i, v in zip(idx.tolist(), other.values, strict=True):
            vals[i] = v
        return Residues(self.width, None, vals)

    def ones(self) -> npt.NDArray[np.bool_]:
        """Which residues equal 1 (an empty histogram cell: the encryption of nothing)."""
        if self._values is not None:
            return np.fromiter((v == _ONE for v in self._values), dtype=bool, count=self.count)
        rows = self._rows()
        if not self.count:
            return np.zeros(0, dtype=bool)
        ones: npt.NDArray[np.bool_] = (rows[:, -1] == 1) & ~rows[:, :-1].any(axis=1)
        return ones

    def nbytes(self) -> int:
        """Memory the residues take in their current forms (bytes object and integers)."""
        total = len(self._data) if self._data is not None else 0
        if self._values is not None:
            total += sum(sys.getsizeof(v) for v in self._values) + 8 * len(self._values)
        return total
