"""A host's features as a scipy.sparse matrix: binned, trained on and predicted from column by
column, never made dense, with the trees of the dense form."""

from __future__ import annotations

import asyncio
import tracemalloc
from concurrent.futures import Executor

import numpy as np
import pytest
import scipy.sparse as sp  # type: ignore[import-untyped]

from p2pboost.exceptions import InputError, InputTypeError
from p2pboost.gbdt.binning import BinMapper, check_features
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.inference.batch import guest_predict, host_predict
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees


def _sparse_features(n: int, m: int, seed: int = 0) -> sp.csr_matrix:
    """``m`` features, 90 % zeros, a few stored NaN (missing) and stored explicit zeros."""
    rng = np.random.default_rng(seed)
    dense = rng.exponential(size=(n, m))
    dense[rng.random((n, m)) < 0.9] = 0.0
    dense[rng.random((n, m)) < 0.01] = np.nan
    coo = sp.coo_matrix(dense)
    r, c = np.argwhere(dense == 0.0)[0]  # an explicit zero is a zero
    data, rows, cols = np.append(coo.data, 0.0), np.append(coo.row, r), np.append(coo.col, c)
    return sp.csr_matrix(sp.coo_matrix((data, (rows, cols)), shape=dense.shape))


def test_sparse_binning_equals_the_dense_binning() -> None:
    X = _sparse_features(500, 8)
    dense = X.toarray()
    a, b = BinMapper(16).fit(X), BinMapper(16).fit(dense)
    for ea, eb in zip(a.edges, b.edges, strict=True):
        np.testing.assert_array_equal(ea, eb)
    sparse_codes, dense_codes = a.transform(X), b.transform(dense)
    np.testing.assert_array_equal(sparse_codes.codes, dense_codes.codes)
    assert sparse_codes.has_missing
    assert dense_codes.has_missing
    cols = np.array([3, 0, 3])
    np.testing.assert_array_equal(
        Features.from_user(X, sparse=True).columns(cols), dense[:, cols].T
    )


def test_sparse_input_is_never_made_dense() -> None:
    """20,000 x 2,000 at 1 % density: its dense float form is 320 MB; binning it costs the
    codes (40 MB) and one column at a time."""
    X = sp.random(20_000, 2_000, density=0.01, format="csr", random_state=1, dtype=np.float64)
    tracemalloc.start()
    try:
        mapper = BinMapper(32).fit(X)
        codes = mapper.transform(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert codes.codes.shape == (2_000, 20_000)
    assert peak < 100 * 2**20  # far below the 320 MB of X.toarray()


def test_sparse_input_is_checked() -> None:
    with pytest.raises(InputTypeError, match="Complex"):
        check_features(sp.csr_matrix(np.ones((2, 2), dtype=np.complex128)))
    with pytest.raises(InputError, match="3 features, the model expects 2"):
        check_features(sp.csr_matrix(np.ones((2, 3))), n_features=2)


@pytest.mark.slow
async def test_a_host_with_sparse_features_trains_and_predicts_as_the_dense_one(
    pool: Executor, keys: Keys
) -> None:
    n = 300
    rng = np.random.default_rng(3)
    X_guest = rng.normal(size=(n, 3))
    X_host = _sparse_features(n, 12, seed=4)
    dense_host = X_host.toarray()
    y = (X_guest[:, 0] + np.nan_to_num(dense_host[:, 1]) > 0.5).astype(np.float64)
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16)

    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:

        async def guest() -> tuple[GuestModel, np.ndarray]:
            async with c["a"].session("train", peers=["b"]) as s:
                model = await guest_train(
                    s, ["b"], X_guest, y, params, config=CONFIG, executor=pool, keys=keys
                )
            async with c["a"].session("predict", peers=["b"]) as s:
                return model, await guest_predict(s, model, X_guest)

        async def host() -> HostModel:
            async with c["b"].session("train", peers=["a"]) as s:
                model = await host_train(s, "a", X_host, executor=pool, workers=2)
            async with c["b"].session("predict", peers=["a"]) as s:
                await host_predict(s, model, X_host.tocsc())
            return model

        (guest_model, margin), host_model = await asyncio.gather(guest(), host())
    joined = np.hstack([X_guest, dense_host])
    core = train(params, joined, y)

    assert_same_trees(joined_trees(guest_model, [host_model]), core)
    np.testing.assert_array_equal(margin, core.predict_margin(joined))
    decisions = host_model.decisions(X_host)
    np.testing.assert_array_equal(decisions.go_left, host_model.decisions(dense_host).go_left)


@pytest.mark.slow
async def test_the_host_facade_keeps_a_sparse_matrix_sparse_through_psi(
    pool: Executor,
) -> None:
    """``HeteroHost.fit`` with a CSR matrix and ids: aligned by PSI, trained as the dense
    form (a COO matrix, which has no row indexing, is taken too)."""
    from p2pboost.hetero.estimators import HeteroGuest, HeteroHost

    n = 240
    rng = np.random.default_rng(5)
    X_guest = rng.normal(size=(n, 2))
    X_host = _sparse_features(n, 6, seed=6)
    y = (X_guest[:, 0] + np.nan_to_num(X_host.toarray()[:, 0]) > 0.3).astype(np.float64)
    ids = np.arange(n)
    host_rows = rng.permutation(n)[:200]  # the host holds a shuffled subset
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    guest = HeteroGuest(params, config=CONFIG, executor=pool)
    host = HeteroHost(executor=pool, workers=2)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        await asyncio.gather(
            guest.afit(c["a"], ["b"], X_guest, y, ids=ids),
            host.afit(c["b"], "a", X_host[host_rows].tocoo(), ids=ids[host_rows]),
        )
    common = guest.aligned_ids_
    joined = np.hstack([X_guest[common], X_host.toarray()[common]])
    assert_same_trees(joined_trees(guest.model_, [host.model_]), train(params, joined, y[common]))
