"""Categorical columns of a DataFrame: one documented encoding, kept in the model.

A pandas column of dtype ``category``, or of strings, cannot be binned as numbers. The core
encodes it **ordinally**: each category becomes its position in a list the model keeps (a
``category`` column's own order of categories; for strings, their sorted order), and the trees
split on those codes like on any number (no native set-valued splits). The lists are stored in
the model file, so prediction applies **the same** encoding by value, whatever order the
categories come in then: a category the model never saw, and a missing value, are missing
(NaN) and follow each split's learned missing direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from p2pboost.exceptions import ModelError

__all__ = ["apply_categories", "fit_categories", "model_categories"]

Categories = dict[str, list[Any]]


def _categorical(column: Any) -> bool:
    kind = str(getattr(column, "dtype", ""))
    return kind == "category" or kind in ("object", "string", "str")


def fit_categories(X: Any) -> Categories | None:
    """The category list of every categorical or string column of a DataFrame ``X`` (None:
    ``X`` has none, or is not a DataFrame)."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    found: Categories = {}
    for name in columns:
        column = X[name]
        if not _categorical(column):
            continue
        if str(column.dtype) == "category":
            found[str(name)] = [_plain(v) for v in column.cat.categories]
        else:
            values = {str(v) for v in column.dropna().tolist()}
            found[str(name)] = sorted(values)
    return found or None


def apply_categories(X: Any, categories: Mapping[str, Sequence[Any]] | None) -> Any:
    """``X`` with each categorical column replaced by its codes in ``categories`` (unknown
    values and missing ones: NaN); anything else as it is."""
    if not categories or getattr(X, "columns", None) is None:
        return X
    out = X.copy()
    for name, values in categories.items():
        if name not in out.columns:
            continue  # a missing column is named later, by the feature-name check
        code = {_key(v): float(i) for i, v in enumerate(values)}
        column = out[name]
        raw = column.astype(object).tolist()
        out[name] = np.array(
            [code.get(_key(v), np.nan) if _present(v) else np.nan for v in raw], dtype=np.float64
        )
    return out


def model_categories(value: Any) -> Categories | None:
    """Category lists read from a model file (ModelError if malformed)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, list) for k, v in value.items()
    ):
        raise ModelError("invalid model: categories must map column names to lists")
    return {k: list(v) for k, v in value.items()}


def _plain(value: Any) -> Any:
    """A category as a JSON value (numpy scalars become Python ones)."""
    return value.item() if hasattr(value, "item") else value


def _key(value: Any) -> str:
    return str(_plain(value))


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value))
