"""A party's CSV files: features read by name, scores written.

The party runner (:mod:`p2pboost.app.party`) reads its training, scoring and serving rows
here. Features are columns of a CSV with a header; a model remembers their names, so a
scoring file is read **by name** in the model's order: a file whose columns were reordered
scores exactly as the original, and one that lacks a model feature, or has a feature column
the model does not know, fails naming it.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.app.config import DataConfig
from p2pboost.exceptions import ConfigError
from p2pboost.tables import read_columns, read_header

__all__ = ["Table", "check_id_column", "load_table", "write_csv", "write_scores"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class Table:
    """A party's CSV as arrays: ids, features (in ``features`` order) and labels if any.

    ``X`` is a float64 array, or a ``scipy.sparse.csr_matrix`` when the table was read with
    ``sparse`` (a host's mostly-zero features: see :mod:`p2pboost.tables`).
    """

    ids: npt.NDArray[Any]
    X: Any
    y: F64 | None
    features: tuple[str, ...]


def load_table(
    data: DataConfig,
    path: Path | None = None,
    *,
    require_label: bool,
    model_features: Sequence[str] | None = None,
    sparse: bool | str = False,
) -> Table:
    """Read ``path`` (default ``data.path``) with ``data``'s columns.

    The label column is used when present and required when ``require_label`` (training);
    a scoring CSV may leave it out. Ids must be unique: alignment and lookups are by id.
    ``model_features``: the names a model was trained on; the features are then read **by
    name** in the model's order, and a column the model needs but the file lacks, or a feature
    column the model does not know, fails naming it (never scores a reordered file by position).
    ``sparse``: how to hold the features (:func:`~p2pboost.tables.read_columns`).
    """
    source = path or data.path
    header = read_header(source)
    check_id_column(source, header, data.id_column)
    for column in data.features:
        if column not in header:
            raise ConfigError(f"{source}: no column {column!r} (columns: {', '.join(header)})")
    label = data.label_column if data.label_column in header else None
    if require_label and data.label_column is not None and label is None:
        raise ConfigError(f"{source}: no label column {data.label_column!r}")
    names = data.features or tuple(c for c in header if c not in (data.id_column, label))
    if model_features is not None:
        names = _model_columns(source, names, model_features)
    if not names and label is None:  # labels alone are a vertical guest's whole table
        raise ConfigError(f"{source}: no feature columns")
    read = read_columns(source, header, data.id_column, names, label, sparse=sparse)
    if np.unique(read.ids).size != read.ids.size:
        raise ConfigError(f"{source}: the id column {data.id_column!r} has duplicates")
    return Table(ids=read.ids, X=read.X, y=read.y, features=tuple(names))


def check_id_column(source: Path, header: Sequence[str], id_column: str) -> None:
    """A ConfigError naming the setting to change when the file has no ``id_column``.

    The id column is ``id`` unless ``[data] id_column`` says otherwise; a file whose ids sit in
    ``customer_id`` fails here on the first run, and the fix is that one setting, so the
    message says so rather than listing the columns alone.
    """
    if id_column not in header:
        raise ConfigError(
            f"{source}: no id column {id_column!r} (columns: {', '.join(header)}); "
            "name the column that holds the ids with [data] id_column"
        )


def _model_columns(source: Path, available: Sequence[str], model: Sequence[str]) -> tuple[str, ...]:
    """The model's feature columns, in its order, if ``available`` holds exactly them."""
    missing = [c for c in model if c not in available]
    unexpected = [c for c in available if c not in model]
    if missing or unexpected:
        said = []
        if missing:
            said.append(f"the model's features {', '.join(missing)} are missing")
        if unexpected:
            said.append(f"columns {', '.join(unexpected)} are not features of the model")
        raise ConfigError(
            f"{source}: {'; '.join(said)} (list the columns to use in [data] features)"
        )
    return tuple(model)


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def write_scores(path: Path, id_column: str, ids: npt.NDArray[Any], scores: F64) -> None:
    """``id,score`` (``score_0..k`` for several outputs); a row no host could score is empty."""
    s = np.asarray(scores, dtype=np.float64)
    s2 = s.reshape(len(ids), -1)
    header = [
        id_column,
        *(["score"] if s2.shape[1] == 1 else [f"score_{k}" for k in range(s2.shape[1])]),
    ]
    rows = [
        [i, *("" if np.isnan(v) else repr(float(v)) for v in row)]
        for i, row in zip(ids.tolist(), s2, strict=True)
    ]
    write_csv(path, header, rows)
