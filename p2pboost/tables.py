"""A party's CSV read by column name, in chunks, without a Python object per cell.

Why: partner tables are long (millions of customers) and wide (a thousand mostly-zero bureau
or telco columns). Reading them with :mod:`csv` keeps one Python string per cell until the
columns are converted: tens of bytes per cell, several times the numbers themselves (and
numpy's text arrays are no better: parsing into ``dtype=str`` makes a Python string per cell
on the way, measured at 180 MB for 400,000 cells). Here a chunk of lines (about
:data:`CHUNK_CELLS` cells) has its missing cells spelled ``nan`` (one regular expression per
line) and is parsed by numpy's C parser straight into float64; only the numbers stay. Ids, one
per row, are parsed as int64 the same way, or kept as strings when they are not integers.

A host's mostly-zero features can stay sparse: with ``sparse=True`` (or ``"auto"`` and at
most :data:`SPARSE_DENSITY` of the first chunk's feature cells non-zero) the features are
gathered chunk by chunk into a ``scipy.sparse.csr_matrix`` (missing values are stored as NaN
entries, zeros are not stored), so the dense matrix never exists; the host bins and reads it
column by column (:mod:`p2pboost.gbdt.binning`). scipy is needed only then
(``pip install 'p2pboost[sparse]'``).

Cells: numbers as Python's ``float`` reads them; empty, ``NA``, ``NaN``, ``nan`` and ``null``
are missing values. Ids are int64 when every id is an integer, else strings. Fields may be
quoted with ``"``; a quoted field may not span lines.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import ConfigError

__all__ = [
    "CHUNK_CELLS",
    "MISSING",
    "PARQUET_SUFFIXES",
    "SPARSE_DENSITY",
    "Columns",
    "is_parquet",
    "read_columns",
    "read_header",
]

F64 = npt.NDArray[np.float64]
#: Cells parsed at once: the text of one chunk is held as a fixed-width array of this many.
CHUNK_CELLS = 1 << 18
#: ``sparse="auto"``: features are kept sparse when at most this share of cells is non-zero.
SPARSE_DENSITY = 1.0 / 3.0
#: File name endings read as Parquet (with pyarrow: ``pip install 'p2pboost[parquet]'``).
PARQUET_SUFFIXES = (".parquet", ".pq")
#: Cell texts read as a missing value (``NaN`` and ``nan`` parse as NaN themselves).
MISSING = ("", "NA", "NaN", "nan", "null")
#: An empty, blank, ``NA`` or ``null`` field of a line (zero-width at its start), to be ``nan``.
_MISSING_FIELD = re.compile(r"(?:(?<=,)|^)[ \t]*(?:NA|null)?[ \t]*(?=,|\r?\n?$)")
#: numpy's parse error: which row and (1-based) column of the parsed selection.
_WHERE = re.compile(r"could not convert string '(.*)' to \w+ at row (\d+), column (\d+)")


@dataclass(frozen=True, slots=True, eq=False)
class Columns:
    """What :func:`read_columns` read: ids, features (dense float64 ``(rows, features)`` or a
    ``scipy.sparse.csr_matrix``) and the label column (None when not asked for)."""

    ids: npt.NDArray[Any]
    X: Any
    y: F64 | None


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """A Parquet file, by its name (``.parquet`` or ``.pq``); anything else is read as CSV."""
    return Path(path).suffix.lower() in PARQUET_SUFFIXES


def read_header(path: str | os.PathLike[str]) -> list[str]:
    """The column names (a CSV's header row, stripped; a Parquet file's schema), with clear
    errors."""
    if is_parquet(path):
        return _parquet_names(path)
    try:
        with Path(path).open(newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), None)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{path}: not a CSV text file ({exc})") from None
    if header is None:
        raise ConfigError(f"{path}: empty file (a header row is required)")
    names = [h.strip() for h in header]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: duplicate column names in the header")
    return names


def read_columns(
    path: str | os.PathLike[str],
    header: Sequence[str],
    id_column: str,
    features: Sequence[str],
    label_column: str | None = None,
    *,
    sparse: bool | str = False,
) -> Columns:
    """Read ``id_column``, ``features`` (in that order) and ``label_column`` of ``path``.

    ``header`` is the file's (:func:`read_header`); every named column must be in it.
    ``sparse``: keep the features as a CSR matrix (True), a dense array (False), or decide
    from the first chunk (``"auto"``).
    """
    if sparse not in (True, False, "auto"):
        raise ConfigError(f"sparse must be true, false or 'auto', not {sparse!r}")
    reader = _Reader(len(features), label_column is not None, sparse)
    if is_parquet(path):
        return _read_parquet(path, id_column, features, label_column, reader)
    where = {name: i for i, name in enumerate(header)}
    numbers = [where[c] for c in features] + ([] if label_column is None else [where[label_column]])
    chunk_bytes = CHUNK_CELLS * 4  # about CHUNK_CELLS cells of a few characters each
    line = 2  # the file line of the chunk's first row
    try:
        with Path(path).open(encoding="utf-8", newline="") as fh:
            fh.readline()  # the header
            while lines := fh.readlines(chunk_bytes):
                rows = [s for s in lines if s.strip()]
                if rows:
                    _check_fields(rows, len(header), path, line)
                    ids = _ids(rows, where[id_column], path, line)
                    fixed = [_MISSING_FIELD.sub("nan", s) for s in rows]
                    reader.add(ids, _floats(fixed, numbers, header, path, line))
                line += len(lines)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc})") from None
    return reader.columns()


def _check_fields(rows: list[str], n_cols: int, path: str | os.PathLike[str], line: int) -> None:
    """Every row has the header's number of fields (commas counted; a row with quoted commas
    is split properly before it is refused)."""
    for i, row in enumerate(rows):
        if row.count(",") + 1 == n_cols:
            continue
        n = len(next(csv.reader([row]), []))
        if n != n_cols:
            raise ConfigError(f"{path}:{line + i}: {n} fields, the header has {n_cols}")


def _parse(rows: list[str], columns: list[int], dtype: type[np.generic]) -> npt.NDArray[Any]:
    return np.loadtxt(
        rows,
        delimiter=",",
        dtype=dtype,
        usecols=columns,
        quotechar='"',
        comments=None,
        ndmin=2,
        encoding=None,
    )


def _floats(
    rows: list[str],
    columns: list[int],
    header: Sequence[str],
    path: str | os.PathLike[str],
    line: int,
) -> F64:
    """The ``columns`` of a chunk as float64 ``(rows, len(columns))``; a cell that is not a
    number fails naming its column (numpy counts the file's columns from 1) and line."""
    if not columns:
        return np.empty((len(rows), 0))
    try:
        return np.asarray(_parse(rows, columns, np.float64), dtype=np.float64)
    except ValueError as exc:
        found = _WHERE.search(str(exc))
        if found is None:
            raise ConfigError(f"{path}: near line {line}: {exc}") from None
        value, row, col = found.group(1), int(found.group(2)), int(found.group(3))
        name, at = header[col - 1], line + row
        raise ConfigError(
            f"{path}: column {name!r} is not numeric: {value[:40]!r} on line {at}"
        ) from None


def _ids(rows: list[str], column: int, path: str | os.PathLike[str], line: int) -> npt.NDArray[Any]:
    """A chunk's ids: int64 when they all are integers, else stripped strings."""
    try:
        return np.asarray(_parse(rows, [column], np.int64)[:, 0], dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    text = np.char.strip(np.asarray(_parse(rows, [column], np.str_)[:, 0], dtype=str))
    if (text == "").any():
        at = int(np.flatnonzero(text == "")[0])
        raise ConfigError(f"{path}: empty id in the id column on line {line + at}")
    return text


def _join_ids(chunks: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """One id array: int64 if every chunk's ids were integers, else strings throughout."""
    if not chunks:
        return np.empty(0, dtype=np.int64)
    if all(c.dtype == np.int64 for c in chunks):
        return np.concatenate(chunks)
    return np.concatenate([c.astype(str) for c in chunks])


def _pyarrow() -> Any:
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - pyarrow comes with the parquet and dev extras
        raise ConfigError("Parquet files need pyarrow: pip install 'p2pboost[parquet]'") from None
    return pa


def _parquet_names(path: str | os.PathLike[str]) -> list[str]:
    pa = _pyarrow()
    try:
        names: list[str] = list(pa.parquet.read_schema(path).names)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except pa.ArrowException as exc:
        raise ConfigError(f"{path}: not a Parquet file ({exc})") from None
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: duplicate column names")
    return names


def _read_parquet(
    path: str | os.PathLike[str],
    id_column: str,
    features: Sequence[str],
    label_column: str | None,
    reader: _Reader,
) -> Columns:
    """:func:`read_columns` for a Parquet file: record batches of about :data:`CHUNK_CELLS`
    cells, each column converted by pyarrow (nulls are missing values), never a Python object
    per cell (ids that are not integers: one string per row)."""
    pa = _pyarrow()
    columns = [id_column, *features, *([] if label_column is None else [label_column])]
    rows_per_batch = max(1, CHUNK_CELLS // len(columns))
    try:
        batches = pa.parquet.ParquetFile(path).iter_batches(rows_per_batch, columns=columns)
        for batch in batches:
            numbers = [
                _arrow_floats(pa, batch.column(j), path, columns[j]) for j in range(1, len(columns))
            ]
            block = np.column_stack(numbers) if numbers else np.empty((batch.num_rows, 0))
            reader.add(_arrow_ids(pa, batch.column(0), path), block)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except pa.ArrowException as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return reader.columns()


def _arrow_floats(pa: Any, column: Any, path: str | os.PathLike[str], name: str) -> F64:
    try:
        values = column.cast(pa.float64())
    except pa.ArrowException:
        raise ConfigError(f"{path}: column {name!r} is not numeric ({column.type})") from None
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)


def _arrow_ids(pa: Any, column: Any, path: str | os.PathLike[str]) -> npt.NDArray[Any]:
    if column.null_count:
        raise ConfigError(f"{path}: empty id in the id column")
    if pa.types.is_integer(column.type):
        return np.asarray(column.to_numpy(), dtype=np.int64)
    return np.char.strip(np.asarray(column.cast(pa.string()).to_pylist(), dtype=str))


class _Reader:
    """A file's columns chunk by chunk, whatever its format: ids, labels, and features as
    dense blocks or CSR pieces (decided at the first chunk)."""

    def __init__(self, n_features: int, labelled: bool, sparse: bool | str) -> None:
        self.n_features = n_features
        self.labelled = labelled
        self.sparse: bool | None = None if sparse == "auto" else bool(sparse)
        self.ids: list[npt.NDArray[Any]] = []
        self.labels: list[F64] = []
        self.blocks: list[F64] = []
        self.data: list[F64] = []
        self.indices: list[npt.NDArray[np.int32]] = []
        self.row_counts: list[npt.NDArray[np.int64]] = []

    def add(self, ids: npt.NDArray[Any], numbers: F64) -> None:
        """One chunk: its ids and its numeric columns (the features, then the label if the
        file is read with one)."""
        self.ids.append(ids)
        block = numbers
        if self.labelled:
            self.labels.append(numbers[:, -1].copy())
            block = numbers[:, :-1]
        block = np.ascontiguousarray(block)
        if self.sparse is None:
            density = np.count_nonzero(block) / max(block.size, 1)
            self.sparse = bool(density <= SPARSE_DENSITY)
        if not self.sparse:
            self.blocks.append(block)
            return
        rows, cols = np.nonzero(block)  # NaN is non-zero: missing values are stored
        self.data.append(block[rows, cols])
        self.indices.append(cols.astype(np.int32))
        self.row_counts.append(np.bincount(rows, minlength=block.shape[0]).astype(np.int64))

    def columns(self) -> Columns:
        """Everything read, joined."""
        ids = _join_ids(self.ids)
        y = None
        if self.labelled:
            y = np.concatenate(self.labels) if self.labels else np.empty(0)
        return Columns(ids, self._matrix(int(ids.size)), y)

    def _matrix(self, n_rows: int) -> Any:
        if not self.sparse:
            if not self.blocks:
                return np.empty((n_rows, self.n_features))
            return np.concatenate(self.blocks) if len(self.blocks) > 1 else self.blocks[0]
        try:
            from scipy import sparse as sp  # type: ignore[import-untyped]
        except ImportError:  # pragma: no cover - scipy comes with the sparse and dev extras
            raise ConfigError(
                "sparse features need scipy: pip install 'p2pboost[sparse]' "
                "(or set data.sparse = false)"
            ) from None
        counts = np.concatenate(self.row_counts) if self.row_counts else np.zeros(0, np.int64)
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        data = np.concatenate(self.data) if self.data else np.empty(0)
        indices = np.concatenate(self.indices) if self.indices else np.empty(0, np.int32)
        return sp.csr_matrix((data, indices, indptr), shape=(n_rows, self.n_features))
