"""Features by sample id: where a serving party looks up the rows a request names.

Online inference sends ids, not rows: each host holds its own features and finds them here.
Stores are loaded once at start (:class:`ArrayStore`, from arrays, CSV or ``.npz``) or ask the
embedding service (:class:`CallbackStore`, e.g. a database query). A lookup is one vectorised
call per batch: ids are kept sorted so that ``np.searchsorted`` finds a whole batch at once.

Ids are compared as strings or as integers, never mixed: an integer id column matches integer
requests, and a string column matches strings (CSV ids are read as strings unless every id is
an integer). The store answers *which* ids it lacks with a mask; what to do about them is the
caller's decision (serving reports them as :class:`~p2pboost.exceptions.UnknownIdError`).
"""

from __future__ import annotations

import inspect
import os
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import ConfigError, InputError
from p2pboost.tables import read_columns, read_header

__all__ = ["ArrayStore", "CallbackStore", "FeatureStore", "normalise_ids"]

F64 = npt.NDArray[np.float64]
B8 = npt.NDArray[np.bool_]
Lookup = tuple[F64, B8]


def normalise_ids(ids: Any) -> npt.NDArray[Any]:
    """A 1-d array of ids as int64 (when every id is an integer) or as str."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise InputError(f"ids must be 1-d, got shape {arr.shape}")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind in "US":
        return arr.astype(str)
    if arr.dtype.kind == "O":
        if all(isinstance(i, int) and not isinstance(i, bool) for i in arr.tolist()):
            return arr.astype(np.int64)
        if all(isinstance(i, str) for i in arr.tolist()):
            return arr.astype(str)
    raise InputError(f"ids must all be integers or all be strings, got dtype {arr.dtype}")


class FeatureStore(ABC):
    """A party's features, by sample id."""

    @property
    @abstractmethod
    def n_features(self) -> int:
        """Columns of every row this store returns."""

    @abstractmethod
    async def lookup(self, ids: npt.NDArray[Any]) -> Lookup:
        """Rows ``(len(ids), n_features)`` for ``ids`` and a mask of the ids found.

        Rows of ids not found are NaN; the caller must not use them.
        """

    def ids(self) -> npt.NDArray[Any]:
        """Every id the store holds (private set intersection needs them)."""
        raise ConfigError(f"{type(self).__name__} cannot list its ids (PSI alignment needs it)")


class ArrayStore(FeatureStore):
    """Features held in memory: ``X[i]`` belongs to ``ids[i]``."""

    def __init__(self, ids: Any, X: Any) -> None:
        keys = normalise_ids(ids)
        rows = np.asarray(X, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != keys.shape[0]:
            raise InputError(
                f"X must be (len(ids), n_features), got {rows.shape} for {keys.size} ids"
            )
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        if sorted_keys.size > 1 and np.any(sorted_keys[1:] == sorted_keys[:-1]):
            dup = sorted_keys[1:][sorted_keys[1:] == sorted_keys[:-1]][0]
            raise InputError(f"ids must be unique; {dup!r} appears more than once")
        self._keys = sorted_keys
        self._rows = np.ascontiguousarray(rows[order])

    @property
    def n_features(self) -> int:
        return int(self._rows.shape[1])

    def __len__(self) -> int:
        return int(self._keys.size)

    def ids(self) -> npt.NDArray[Any]:
        return self._keys.copy()

    def lookup_now(self, ids: Any) -> Lookup:
        """:meth:`lookup` without the event loop (the work is one ``searchsorted``)."""
        want = normalise_ids(ids)
        if self._keys.size == 0 or want.size == 0 or want.dtype.kind != self._keys.dtype.kind:
            # An id of another kind (a string where the store has integers) is not held.
            return np.full((want.size, self.n_features), np.nan), np.zeros(want.size, np.bool_)
        pos = np.searchsorted(self._keys, want)
        np.minimum(pos, self._keys.size - 1, out=pos)
        found = self._keys[pos] == want
        rows = self._rows[pos]
        rows[~found] = np.nan
        return rows, found

    async def lookup(self, ids: npt.NDArray[Any]) -> Lookup:
        return self.lookup_now(ids)

    @classmethod
    def from_npz(cls, path: str | os.PathLike[str]) -> ArrayStore:
        """A store from an ``.npz`` file with arrays ``ids`` and ``X``."""
        try:
            with np.load(path, allow_pickle=False) as data:
                return cls(data["ids"], data["X"])
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"{path}: not an .npz with arrays 'ids' and 'X' ({exc})") from exc

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike[str],
        id_column: str,
        *,
        features: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
    ) -> ArrayStore:
        """A store from a CSV with a header: ``id_column`` and numeric feature columns.

        ``features`` picks columns (in that order); otherwise every column but the id and
        ``exclude`` (e.g. a label). Empty cells are missing values (NaN).
        """
        header = read_header(path)
        if id_column not in header:
            raise ConfigError(f"{path}: no id column {id_column!r} (columns: {header})")
        names = (
            list(features)
            if features
            else [c for c in header if c != id_column and c not in set(exclude)]
        )
        missing = [c for c in names if c not in header]
        if missing:
            raise ConfigError(f"{path}: no column(s) {missing} (columns: {header})")
        read = read_columns(path, header, id_column, names)
        return cls(read.ids, read.X)


class CallbackStore(FeatureStore):
    """Features from a function of the embedding service: ``fn(ids) -> (X, found)``.

    ``fn`` may be a coroutine function (a database query); it is called once per batch.
    """

    def __init__(
        self,
        n_features: int,
        fn: Callable[[npt.NDArray[Any]], Lookup | Awaitable[Lookup]],
    ) -> None:
        if n_features < 1:
            raise InputError("n_features must be at least 1")
        self._n_features = n_features
        self._fn = fn

    @property
    def n_features(self) -> int:
        return self._n_features

    async def lookup(self, ids: npt.NDArray[Any]) -> Lookup:
        result = self._fn(ids)
        if inspect.isawaitable(result):
            result = await result
        X, found = result
        rows = np.asarray(X, dtype=np.float64)
        mask = np.asarray(found, dtype=np.bool_)
        if rows.shape != (ids.size, self._n_features) or mask.shape != (ids.size,):
            raise InputError(
                f"feature callback returned X {rows.shape} and found {mask.shape}; "
                f"expected ({ids.size}, {self._n_features}) and ({ids.size},)"
            )
        return rows, mask
