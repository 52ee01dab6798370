"""Feature stores: vectorised lookup by id, clear errors for bad files and ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import ConfigError, InputError
from p2pboost.hetero.inference.feature_store import ArrayStore, CallbackStore


async def test_array_store_finds_ids_in_any_order() -> None:
    store = ArrayStore([30, 10, 20], [[3.0, 0.3], [1.0, 0.1], [2.0, 0.2]])
    X, found = await store.lookup(np.array([20, 99, 30, 10]))
    np.testing.assert_array_equal(found, [True, False, True, True])
    np.testing.assert_array_equal(X[[0, 2, 3]], [[2.0, 0.2], [3.0, 0.3], [1.0, 0.1]])
    assert np.isnan(X[1]).all()
    assert store.n_features == 2
    assert len(store) == 3
    np.testing.assert_array_equal(store.ids(), [10, 20, 30])


async def test_string_ids_and_kind_mismatch() -> None:
    store = ArrayStore(["b", "a"], [[2.0], [1.0]])
    X, found = await store.lookup(np.array(["a", "zz"]))
    assert found.tolist() == [True, False]
    assert X[0, 0] == 1.0
    X, found = await store.lookup(np.array([1, 2]))  # integers are never string ids
    assert not found.any()
    assert np.isnan(X).all()


def test_duplicate_ids_and_shapes_are_refused() -> None:
    with pytest.raises(InputError, match="appears more than once"):
        ArrayStore([1, 2, 1], np.zeros((3, 1)))
    with pytest.raises(InputError, match="X must be"):
        ArrayStore([1, 2], np.zeros((3, 1)))
    with pytest.raises(InputError, match="integers or all be strings"):
        ArrayStore(np.array([1, "a"], dtype=object), np.zeros((2, 1)))


async def test_csv_store(tmp_path: Path) -> None:
    path = tmp_path / "host.csv"
    path.write_text("id,x1,label,x2\n7,1.5,0,\nA9,2.5,1,3\n")
    store = ArrayStore.from_csv(path, "id", exclude=["label"])
    X, found = await store.lookup(np.array(["A9", "7"]))
    assert found.all()
    np.testing.assert_array_equal(X[0], [2.5, 3.0])
    assert X[1, 0] == 1.5
    assert np.isnan(X[1, 1])  # an empty cell is a missing value
    picked = ArrayStore.from_csv(path, "id", features=["x2"])
    assert picked.n_features == 1


def test_csv_errors_name_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("id,x\n1,abc\n")
    with pytest.raises(ConfigError, match="column 'x' is not numeric"):
        ArrayStore.from_csv(path, "id")
    with pytest.raises(ConfigError, match="no id column 'key'"):
        ArrayStore.from_csv(path, "key")
    with pytest.raises(ConfigError, match="cannot read"):
        ArrayStore.from_csv(tmp_path / "missing.csv", "id")
    path.write_text("id,x\n1,2,3\n")
    with pytest.raises(ConfigError, match=r"bad.csv:2: 3 fields"):
        ArrayStore.from_csv(path, "id")


async def test_npz_store(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", ids=np.array([5, 6]), X=np.array([[1.0], [2.0]]))
    store = ArrayStore.from_npz(tmp_path / "s.npz")
    X, found = await store.lookup(np.array([6]))
    assert found.all()
    assert X[0, 0] == 2.0
    np.savez(tmp_path / "t.npz", rows=np.zeros(2))
    with pytest.raises(ConfigError, match="arrays 'ids' and 'X'"):
        ArrayStore.from_npz(tmp_path / "t.npz")


async def test_callback_store_sync_async_and_checked() -> None:
    async def query(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ids[:, None].astype(float), ids % 2 == 0

    store = CallbackStore(1, query)
    X, found = await store.lookup(np.array([2, 3]))
    assert found.tolist() == [True, False]
    assert X[0, 0] == 2.0
    bad = CallbackStore(2, lambda ids: (np.zeros((ids.size, 1)), np.ones(ids.size, bool)))
    with pytest.raises(InputError, match="expected"):
        await bad.lookup(np.array([1]))
    with pytest.raises(ConfigError, match="cannot list its ids"):
        store.ids()
