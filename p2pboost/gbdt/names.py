"""Feature names: taken from the data, kept in the model, matched at prediction.

A model trained on columns ``age, income, debt`` and given a file whose columns are ``income,
age, debt`` must not score it as if nothing had changed: that silently swaps features (the
scores look plausible and are wrong). So a model keeps the names of its features, from a
DataFrame's columns, a CSV header or the caller, and prediction input that carries names is
matched **by name**: reordered columns are put back in the model's order, and missing or
unexpected columns fail naming them. Input without names (a numpy array) is taken by position,
as before. Names follow scikit-learn's rule: only columns that are all strings count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from p2pboost.exceptions import InputError, ModelError

__all__ = ["by_name", "check_names", "column_order", "model_names", "names_of"]

#: Shown when names do not match (scikit-learn's wording, which its users search for).
MISMATCH = "The feature names should match those that were passed during fit."


def names_of(X: Any) -> list[str] | None:
    """The column names of a DataFrame-like ``X`` if they are all strings, else None."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    names = list(columns)
    return names if names and all(isinstance(c, str) for c in names) else None


def check_names(
    names: Sequence[str] | None, n_features: int, what: str = "feature"
) -> list[str] | None:
    """``names`` as a list, if they name ``n_features`` distinct features (InputError if not)."""
    if names is None:
        return None
    out = list(names)
    if not all(isinstance(n, str) and n for n in out):
        raise InputError(f"{what} names must be non-empty strings")
    if len(out) != n_features:
        raise InputError(f"{len(out)} {what} names for {n_features} features")
    twice = sorted({n for n in out if out.count(n) > 1})
    if twice:
        raise InputError(f"{what} names appear more than once: {', '.join(twice)}")
    return out


def model_names(value: Any, n_features: int) -> list[str] | None:
    """Names read from a model file (ModelError if they do not fit its features)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ModelError("invalid model: feature names must be a list")
    try:
        return check_names(value, n_features)
    except InputError as exc:
        raise ModelError(f"invalid model: {exc}") from None


def by_name(X: Any, names: Sequence[str] | None) -> Any:
    """``X`` with its columns in the order of ``names``, when both it and the model have
    names (otherwise ``X`` as it is, taken by position)."""
    given = names_of(X)
    if names is None or given is None or column_order(given, names) is None:
        return X
    return X[list(names)]  # the same columns, in the model's order


def column_order(given: Sequence[str], names: Sequence[str]) -> list[int] | None:
    """Where each of the model's ``names`` sits among the ``given`` columns (None: already in
    order); InputError naming the unseen, missing or repeated ones if they do not match."""
    if list(given) == list(names):
        return None
    expected = set(names)
    unseen = [c for c in given if c not in expected]
    missing = [c for c in names if c not in set(given)]
    if unseen or missing or len(set(given)) != len(given):
        problems = []
        if unseen:
            problems.append(f"Feature names unseen at fit time: {', '.join(unseen)}.")
        if missing:
            problems.append(
                f"Feature names seen at fit time, yet now missing: {', '.join(missing)}."
            )
        if not problems:
            problems.append("Some feature names appear more than once.")
        raise InputError(" ".join([MISMATCH, *problems]))
    where = {c: i for i, c in enumerate(given)}
    return [where[c] for c in names]
