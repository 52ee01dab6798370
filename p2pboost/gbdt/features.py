"""A party's features as one value, validated once where they enter the library.

Users hand over their data in many shapes: a numpy array, a list of rows, a pandas DataFrame
(named columns, categorical or string columns), a scipy.sparse matrix. Every public entry point
(the core's :func:`~p2pboost.gbdt.booster.train` and ``Booster.predict``, the estimators,
``guest_train``/``host_train``, batch and online prediction, the horizontal client) turns that
into a :class:`Features` **once**, with :meth:`Features.from_user`, and passes the value down:
categorical columns are encoded with the model's lists, named columns are put in the model's
order, the matrix is checked (2-D, numeric, the expected width) and kept as float64, dense or
sparse. Nothing below the boundary takes an untyped ``X``, so nothing re-checks it either (the
walk from ``host_train`` to binning used to check the same matrix five times).

The value is immutable and carries what the layers below need to know: the names of its
columns (or None: taken by position), the category lists it was encoded with, whether it is
sparse, and whether any value is missing. A :class:`Features` handed to a public entry point
again is taken as it is (only its width is checked), so converting early costs nothing later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, InputTypeError
from p2pboost.gbdt.categories import Categories, apply_categories
from p2pboost.gbdt.names import by_name, column_order, names_of

__all__ = ["CscMatrix", "Features", "check_features", "check_matrix", "is_sparse"]

F64 = npt.NDArray[np.float64]


class CscMatrix(Protocol):
    """A scipy.sparse matrix in compressed-column form, as the core reads it (the core does
    not import scipy: the optional ``sparse`` extra brings it)."""

    shape: tuple[int, int]
    format: str
    indptr: npt.NDArray[np.integer[Any]]
    indices: npt.NDArray[np.integer[Any]]
    data: F64

    def tocsr(self) -> Any: ...

    def toarray(self) -> F64: ...

    def __getitem__(self, key: Any) -> Any: ...


def check_matrix(
    X: Any, name: str = "X", n_features: int | None = None, *, allow_no_features: bool = False
) -> F64:
    """``X`` as a 2-D float64 array; NaN allowed (missing), anything else non-numeric is not.

    A scipy.sparse matrix is made dense here (its implicit entries are zeros, not missing
    values); complex numbers are refused rather than silently cut to their real part.
    ``allow_no_features``: rows without columns are valid (a vertical guest that holds only
    the labels). The raw-data side of :meth:`Features.from_user`.
    """
    if hasattr(X, "toarray") and hasattr(X, "nnz"):  # scipy.sparse, without importing scipy
        X = X.toarray()
    raw = X if isinstance(X, np.ndarray) else None
    if raw is not None and raw.dtype.kind == "c":
        raise InputTypeError(f"Complex data not supported: {name} holds complex numbers")
    try:
        arr = np.asarray(X, dtype=np.float64)
    except TypeError as exc:
        raise InputTypeError(f"{name} must be a numeric 2-D array: {exc}") from None
    except ValueError as exc:
        raise InputError(f"{name} must be a numeric 2-D array: {exc}") from None
    if arr.ndim == 1:
        raise InputError(
            f"{name} must be 2-D (rows, features), got a 1-D array of shape {arr.shape}. "
            "Reshape your data with X.reshape(-1, 1) for one feature, or X.reshape(1, -1) for "
            "one row"
        )
    if arr.ndim != 2:
        raise InputError(f"{name} must be 2-D (rows, features), got shape {arr.shape}")
    for axis, what in ((1, "feature"), (0, "sample")):
        if arr.shape[axis] == 0 and not (axis == 1 and allow_no_features):
            raise InputError(
                f"{name} has 0 {what}(s) (shape={arr.shape}) while a minimum of 1 is required."
            )
    if n_features is not None and arr.shape[1] != n_features:
        raise InputError(f"{name} has {arr.shape[1]} features, the model expects {n_features}")
    return arr


def is_sparse(X: object) -> bool:
    """Whether ``X`` is a scipy.sparse matrix or array (without importing scipy)."""
    return hasattr(X, "tocsc") and hasattr(X, "nnz")


def check_features(
    X: Any, name: str = "X", n_features: int | None = None, *, allow_no_features: bool = False
) -> F64 | CscMatrix:
    """``X`` checked as :func:`check_matrix` does, but a scipy.sparse matrix stays sparse: a
    float64 CSC matrix (its implicit entries are zeros; an explicit NaN is a missing value),
    which the bins and :meth:`Features.columns` read column by column, so wide sparse data is
    never made dense. The raw-data side of :meth:`Features.from_user` with ``sparse=True``."""
    if not is_sparse(X):
        return check_matrix(X, name, n_features, allow_no_features=allow_no_features)
    if X.dtype.kind == "c":
        raise InputTypeError(f"Complex data not supported: {name} holds complex numbers")
    if X.dtype.kind not in "biuf":
        raise InputTypeError(f"{name} must hold numbers, not {X.dtype}")
    csc = X.tocsc().astype(np.float64)
    csc.sum_duplicates()
    shape = csc.shape
    if len(shape) != 2 or shape[0] == 0 or (shape[1] == 0 and not allow_no_features):
        raise InputError(f"{name} must be 2-D with rows and features, got shape {shape}")
    if n_features is not None and shape[1] != n_features:
        raise InputError(f"{name} has {shape[1]} features, the model expects {n_features}")
    csc_matrix: CscMatrix = csc
    return csc_matrix


@dataclass(frozen=True, slots=True, eq=False)
class Features:
    """A party's features, checked: ``matrix`` is a float64 ``(rows, features)`` array or a
    float64 CSC sparse matrix (implicit entries are zeros, NaN is missing).

    Build it with :meth:`from_user`; the fields are what it found, not options.
    """

    matrix: F64 | CscMatrix
    #: The columns' names (from a DataFrame or the caller), or None: taken by position.
    names: tuple[str, ...] | None = None
    #: The category lists the categorical columns were encoded with (None: none).
    categories: Categories | None = None
    #: False only if no value is missing (NaN).
    has_missing: bool = True

    @classmethod
    def from_user(
        cls,
        X: Any,
        *,
        name: str = "X",
        feature_names: Sequence[str] | None = None,
        categories: Mapping[str, Sequence[Any]] | None = None,
        order: Sequence[str] | None = None,
        n_features: int | None = None,
        sparse: bool = False,
        allow_no_features: bool = False,
    ) -> Features:
        """``X`` as the library takes it, checked once.

        ``categories``: encode the categorical columns of a DataFrame with these lists
        (:func:`~p2pboost.gbdt.categories.apply_categories`); ``feature_names``: the columns'
        names (default: a DataFrame's, when they are all strings); ``order``: a model's
        feature names, to which named columns are matched by name (reordered; missing or
        unseen ones refused, :func:`~p2pboost.gbdt.names.by_name`); ``n_features``: the width
        required; ``sparse``: keep a scipy.sparse matrix sparse (otherwise it is made dense);
        ``allow_no_features``: rows without columns are valid (a guest with labels only).
        ``name`` names ``X`` in error messages. A :class:`Features` is taken as it is (made
        dense if ``sparse`` is False, reordered by ``order``, its width checked).
        """
        if isinstance(X, Features):
            return X._checked(name, order, n_features, sparse)
        coded = apply_categories(X, categories)
        given = names_of(coded) if feature_names is None else list(feature_names)
        if order is not None:
            coded = by_name(coded, order)
            if given is not None:  # a warm start: the model's columns, in its order
                given = list(order)
        if sparse:
            matrix = check_features(coded, name, n_features, allow_no_features=allow_no_features)
        else:
            matrix = check_matrix(coded, name, n_features, allow_no_features=allow_no_features)
        used = {k: list(v) for k, v in categories.items()} if categories else None
        return cls(
            matrix,
            None if given is None else tuple(given),
            used,
            _any_missing(matrix),
        )

    # -- what it holds ---------------------------------------------------------------------

    @property
    def is_sparse(self) -> bool:
        return not isinstance(self.matrix, np.ndarray)

    @property
    def n_rows(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def dtype(self) -> np.dtype[np.float64]:
        return np.dtype(np.float64)

    def dense(self) -> F64:
        """The matrix as a dense float64 array (the matrix itself when it is dense)."""
        if isinstance(self.matrix, np.ndarray):
            return self.matrix
        return np.asarray(self.matrix.toarray(), dtype=np.float64)

    def column(self, f: int) -> F64:
        """Column ``f`` as a dense float64 vector (a copy for sparse data only)."""
        if isinstance(self.matrix, np.ndarray):
            return self.matrix[:, f]
        csc = self.matrix
        col = np.zeros(csc.shape[0], dtype=np.float64)
        lo, hi = csc.indptr[f], csc.indptr[f + 1]
        col[csc.indices[lo:hi]] = csc.data[lo:hi]
        return col

    def columns(self, features: npt.NDArray[np.int64]) -> F64:
        """The values of ``features`` (repeats allowed), shape ``(len(features), rows)``: for
        sparse data only those columns are made dense."""
        if isinstance(self.matrix, np.ndarray):
            return np.asarray(self.matrix[:, features].T, dtype=np.float64)
        out = np.empty((len(features), self.n_rows), dtype=np.float64)
        for i, f in enumerate(np.asarray(features).tolist()):
            out[i] = self.column(f)
        return out

    def rows(self, index: npt.NDArray[np.int64]) -> Features:
        """These rows (in this order), the same columns, names and encoding."""
        if isinstance(self.matrix, np.ndarray):
            part: F64 | CscMatrix = self.matrix[index]
        else:
            part = self.matrix.tocsr()[index].tocsc()
        return Features(part, self.names, self.categories, _any_missing(part))

    # -- the boundary, again ----------------------------------------------------------------

    def _checked(
        self, name: str, order: Sequence[str] | None, n_features: int | None, sparse: bool
    ) -> Features:
        out = self
        if self.is_sparse and not sparse:
            out = Features(self.dense(), self.names, self.categories, self.has_missing)
        if order is not None and out.names is not None:
            index = column_order(out.names, order)
            if index is not None:
                matrix = (
                    out.matrix[:, index]
                    if isinstance(out.matrix, np.ndarray)
                    else (out.matrix[:, index].tocsc())
                )
                out = Features(matrix, tuple(order), out.categories, out.has_missing)
        if n_features is not None and out.n_features != n_features:
            raise InputError(
                f"{name} has {out.n_features} features, the model expects {n_features}"
            )
        return out


def _any_missing(matrix: F64 | CscMatrix) -> bool:
    values = matrix if isinstance(matrix, np.ndarray) else matrix.data
    return bool(np.isnan(values).any())
