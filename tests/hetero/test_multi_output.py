"""Multi-output trees in vertical training (SecureBoost+ SBT-MO): one tree per round for every
class, its rows' gradient vectors packed into as few ciphertexts as the key allows, equal to
the core's multi-output trees on the joined data."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero._messages import Chunk, Package, TreeStart
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees, merged_model
from p2pboost.hetero.training import guest_layers as _guest
from p2pboost.hetero.training import host_tree as _host
from p2pboost.hetero.training.common import chunk_bounds
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees, federate, predict


def _classes(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``k`` classes from 9 features (3 per party) with 10 % of the values missing."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 9))
    score = X[:, :3].sum(axis=1) + X[:, 3:6].sum(axis=1) - X[:, 6:].sum(axis=1)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, k + 1)[1:-1])).astype(float)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, y


def _record(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every message the hosts and the guest take in, in order."""
    received: list[Any] = []
    for module in (_host, _guest):
        real = module.recv

        async def recording(channel: Any, expected: Any, _real: Any = real) -> Any:
            msg = await _real(channel, expected)
            received.append(msg)
            return msg

        monkeypatch.setattr(module, "recv", recording)
    return received


@pytest.mark.slow
@pytest.mark.parametrize(("k", "planes"), [(3, 1), (11, 2)])
async def test_multi_output_trees_equal_the_core(
    pool: Executor, keys: Keys, monkeypatch: pytest.MonkeyPatch, k: int, planes: int
) -> None:
    """Two hosts, missing values; 3 classes fit one 1023-bit plaintext per row, 11 need two,
    whose short second planes share ciphertexts in the packages. The gradient stream's chunks grow
    to a cap counted in ciphertexts, so rows of two planes make chunks of half the rows."""
    X, y = _classes(240, k)
    received = _record(monkeypatch)
    params = BoostParams(
        objective="multi:softmax",
        num_class=k,
        n_estimators=3,
        max_depth=3,
        max_bin=8,
        multi_strategy="multi_output_tree",
    )
    blocks = [X[:, :3], X[:, 3:6], X[:, 6:]]
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        config = replace(CONFIG, chunk_rows=32, max_chunk_rows=128)
        fed = await federate(c, blocks[0], y, blocks[1:], params, pool, keys, config=config)
        margin = await predict(c, fed, blocks[0], blocks[1:])
    core = train(params, X, y)
    assert len(fed.guest.trees) == 3  # one tree per round
    assert fed.guest.trees[0].value.shape[1] == k
    assert_same_trees(fed.joined(), core)
    np.testing.assert_array_equal(margin, core.predict_margin(X))
    assert {int(o) for t in fed.guest.trees for o in t.owner} >= {0, 1, 2}
    # The model files keep the vector leaves; the merged model predicts what the federation did.
    again = GuestModel.from_dict(fed.guest.to_dict())
    assert_same_trees(joined_trees(again, fed.hosts), core)
    merged = merged_model(again, [HostModel.from_dict(h.to_dict()) for h in fed.hosts])
    np.testing.assert_allclose(merged.predict_margin(X), margin, rtol=0, atol=1e-12)

    starts = [m for m in received if isinstance(m, TreeStart)]
    assert starts
    assert {m.outputs for m in starts} == {k}
    width = keys[0].ciphertext_bytes
    rows = sum(len(m.ct) for m in received if isinstance(m, Chunk))
    assert rows == planes * 240 * len(starts)  # every host, every tree: `planes` per row
    # Per tree and host (the two hosts receive concurrently): 32 rows, then doubling up to 128
    # ciphertexts (128 // planes rows).
    sizes = sorted(len(m.ct) // planes for m in received if isinstance(m, Chunk))
    stream = [b - a for a, b in chunk_bounds(240, 32, 128 // planes)]
    assert sizes == sorted(stream * len(starts))  # a tree start per host and tree
    assert max(sizes) * planes == 128
    packages = [m for m in received if isinstance(m, Package)]
    candidates = sum(m.ids.size for m in packages)
    ciphertexts = sum(len(m.ciphertexts.data) // width for m in packages)
    assert ciphertexts < planes * candidates  # compressed, short planes shared


@pytest.mark.slow
async def test_multi_output_trees_under_ou(pool: Executor, ou_keys: Keys) -> None:
    """Okamoto-Uchiyama's smaller plaintexts (341 bits at 1024) take 11 classes in four
    planes; the trees are still the core's."""
    X, y = _classes(160, 11, seed=1)
    params = BoostParams(
        objective="multi:softmax",
        num_class=11,
        n_estimators=2,
        max_depth=2,
        max_bin=8,
        multi_strategy="multi_output_tree",
    )
    config = replace(CONFIG, scheme="ou")
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :4], y, [X[:, 4:]], params, pool, ou_keys, config=config)
    assert_same_trees(fed.joined(), train(params, X, y))
