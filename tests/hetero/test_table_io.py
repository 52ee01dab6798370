"""A party's CSV read in chunks: the numbers of :mod:`csv` without a Python object per cell,
mostly-zero features kept sparse, and errors that name the column and line."""

from __future__ import annotations

import csv
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse as sp  # type: ignore[import-untyped]

from p2pboost import tables as table_io
from p2pboost.app._tables import load_table
from p2pboost.app.config import DataConfig
from p2pboost.exceptions import ConfigError
from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.tables import read_columns, read_header


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _sparse_table(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.where(rng.random((n, m)) < 0.05, rng.integers(1, 500, (n, m)).astype(float), 0.0)
    X[rng.random((n, m)) < 0.01] = np.nan
    return np.arange(n) * 7 + 3, X


def _cells(X: np.ndarray) -> list[list[object]]:
    return [["" if np.isnan(v) else repr(float(v)) for v in row] for row in X]


def test_columns_by_name_with_missing_values_and_quoted_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.csv",
        ["id", "a", "y", "b"],
        [[" 10", "1.5", "1", "NA"], ["11", "", "0", "-2e3"], ["12", "null", "1", "  4 "]],
    )
    path.write_text(path.read_text().replace("1.5", '"1.5"'))  # a quoted number
    read = read_columns(path, read_header(path), "id", ["b", "a"], "y")
    np.testing.assert_array_equal(read.ids, [10, 11, 12])
    assert read.ids.dtype == np.int64
    np.testing.assert_array_equal(read.X, [[np.nan, 1.5], [-2000.0, np.nan], [4.0, np.nan]])
    np.testing.assert_array_equal(read.y, [1.0, 0.0, 1.0])
    named = _write(tmp_path / "s.csv", ["id", "a"], [["x-1", "1"], ["y,2", "2"]])
    np.testing.assert_array_equal(read_columns(named, ["id", "a"], "id", ["a"]).ids, ["x-1", "y,2"])


def test_bad_cells_and_rows_are_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", ["id", "a"], [["1", "2"], ["2", "three"]])
    with pytest.raises(ConfigError, match=r"column 'a' is not numeric: 'three' on line 3"):
        read_columns(path, ["id", "a"], "id", ["a"])
    path.write_text("id,a\n1,2\n2,3,4\n")
    with pytest.raises(ConfigError, match="the header has 2"):
        read_columns(path, ["id", "a"], "id", ["a"])
    path.write_text("id,a\n1,2\n,3\n")
    with pytest.raises(ConfigError, match="empty id"):
        read_columns(path, ["id", "a"], "id", ["a"])
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(ConfigError, match="empty file"):
        read_header(tmp_path / "e.csv")
    with pytest.raises(ConfigError, match="sparse must be"):
        read_columns(path, ["id", "a"], "id", ["a"], sparse="yes")


@pytest.mark.parametrize("chunk_cells", [7, table_io.CHUNK_CELLS])
def test_mostly_zero_features_stay_sparse_and_equal_the_dense_read(
    tmp_path: Path, chunk_cells: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_io, "CHUNK_CELLS", chunk_cells)  # many chunks, or one
    ids, X = _sparse_table(300, 12)
    header = ["id", *(f"x{j}" for j in range(12))]
    path = _write(
        tmp_path / "h.csv", header, [[i, *c] for i, c in zip(ids, _cells(X), strict=True)]
    )
    names = header[1:]
    dense = read_columns(path, header, "id", names, sparse=False).X
    np.testing.assert_array_equal(dense, X)
    for choice in (True, "auto"):
        got = read_columns(path, header, "id", names, sparse=choice).X
        assert sp.issparse(got)
        assert got.format == "csr"
        assert got.nnz == np.count_nonzero(X)  # zeros are not stored; missing values are
        np.testing.assert_array_equal(got.toarray(), X)
    full = np.random.default_rng(1).normal(size=(50, 3))
    path = _write(tmp_path / "d.csv", ["id", "a", "b", "c"], [[i, *r] for i, r in enumerate(full)])
    assert isinstance(
        read_columns(path, ["id", "a", "b", "c"], "id", ["a", "b", "c"]).X, np.ndarray
    )
    table = load_table(DataConfig(path), require_label=False, sparse="auto")
    assert isinstance(table.X, np.ndarray)  # dense data stays dense under "auto"


def test_a_wide_sparse_file_is_read_without_a_dense_matrix_or_a_string_per_cell(
    tmp_path: Path,
) -> None:
    """10,000 x 400 cells, 5 % non-zero: the dense matrix alone would take 32 MB, and a Python
    string per cell several times that; the read peaks far below both."""
    n, m = 10_000, 400
    ids, X = _sparse_table(n, m, seed=2)
    header = ["id", *(f"f{j}" for j in range(m))]
    path = _write(
        tmp_path / "wide.csv", header, [[i, *c] for i, c in zip(ids, _cells(X), strict=True)]
    )
    tracemalloc.start()
    try:
        table = load_table(DataConfig(path), require_label=False, sparse="auto")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sp.issparse(table.X)
    np.testing.assert_array_equal(table.X.toarray(), X)
    assert peak < X.nbytes / 3, f"peak {peak / 2**20:.1f} MiB"


def test_a_store_reads_its_csv_the_same_way(tmp_path: Path) -> None:
    ids, X = _sparse_table(40, 3)
    path = _write(
        tmp_path / "s.csv",
        ["id", "a", "b", "c"],
        [[i, *c] for i, c in zip(ids, _cells(X), strict=True)],
    )
    store = ArrayStore.from_csv(path, "id", features=["c", "a"])
    assert store.n_features == 2
    with pytest.raises(ConfigError, match="no column"):
        ArrayStore.from_csv(path, "id", features=["zz"])


def _parquet(path: Path, columns: dict[str, object]) -> Path:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    pq.write_table(pa.table(columns), path, row_group_size=64)
    return path


@pytest.mark.parametrize("chunk_cells", [9, table_io.CHUNK_CELLS])
def test_parquet_files_read_as_csv_files_are(
    tmp_path: Path, chunk_cells: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Columns by name, nulls as missing values, integer or string ids, mostly-zero features
    kept sparse: a Parquet file reads as the same CSV would."""
    monkeypatch.setattr(table_io, "CHUNK_CELLS", chunk_cells)
    ids, X = _sparse_table(200, 6, seed=3)
    cols: dict[str, object] = {"id": ids, "y": (ids % 2).astype(float)}
    for j in range(6):
        cols[f"x{j}"] = [None if np.isnan(v) else v for v in X[:, j]]
    path = _parquet(tmp_path / "t.parquet", cols)
    assert read_header(path) == ["id", "y", *(f"x{j}" for j in range(6))]
    table = load_table(DataConfig(path, label_column="y"), require_label=True, sparse="auto")
    assert sp.issparse(table.X)
    np.testing.assert_array_equal(table.X.toarray(), X)
    np.testing.assert_array_equal(table.ids, ids)
    np.testing.assert_array_equal(table.y, ids % 2)
    dense = read_columns(path, read_header(path), "id", ["x5", "x0"])
    np.testing.assert_array_equal(dense.X, X[:, [5, 0]])
    named = _parquet(tmp_path / "s.pq", {"id": [" a", "b"], "v": [1.5, 2.0], "s": ["p", "q"]})
    read = read_columns(named, read_header(named), "id", ["v"])
    np.testing.assert_array_equal(read.ids, ["a", "b"])
    with pytest.raises(ConfigError, match=r"column 's' is not numeric"):
        read_columns(named, read_header(named), "id", ["s"])
    store = ArrayStore.from_csv(named, "id", features=["v"])
    assert store.n_features == 1
    (tmp_path / "bad.parquet").write_text("id,x\n1,2\n")
    with pytest.raises(ConfigError, match="not a Parquet file"):
        read_header(tmp_path / "bad.parquet")
