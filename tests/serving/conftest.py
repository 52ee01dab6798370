"""A small hetero model trained once per test session (guest ``a``, hosts ``b`` and ``c``).

The serving tests only need *a* trained model and its per-party files; training it once (4
trees over the in-memory network, 1024-bit keys by explicit opt-in) keeps them fast. Rows get
integer ids ``1000 + i``; each host's feature store holds its columns of every row.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from p2pboost.crypto.paillier import generate_keypair
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from p2pboost.workers import process_pool
from tests.hetero.conftest import Federated, federate
from tests.node.conftest import (  # noqa: F401 (fixtures used by the serving tests)
    fabric,
    memory_fabric,
    node_federation,
)

GUEST_COLS = slice(0, 10)
HOST_COLS = {"b": slice(10, 20), "c": slice(20, 30)}


@dataclass
class Trained:
    fed: Federated
    ids: np.ndarray
    X: np.ndarray  # all 30 columns (the joined view, for reference computations)
    folder: Path

    @property
    def guest(self) -> GuestModel:
        return self.fed.guest

    def host(self, name: str) -> HostModel:
        return self.fed.hosts[list(self.fed.guest.hosts).index(name)]

    def guest_X(self, rows: np.ndarray | slice | int | np.integer = slice(None)) -> np.ndarray:
        return self.X[rows][..., GUEST_COLS]

    def store(self, name: str) -> ArrayStore:
        return ArrayStore(self.ids, self.X[:, HOST_COLS[name]])

    def reference_margin(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The guest model's own margins from every host's local decisions (no network)."""
        decisions = [
            self.host(h).decisions(self.X[rows][:, HOST_COLS[h]]) for h in self.guest.hosts
        ]
        return self.guest.predict_margin(self.guest_X(rows), decisions)


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = X.copy()
    X[np.random.default_rng(1).random(X.shape) < 0.05] = np.nan
    params = BoostParams(n_estimators=4, max_depth=3, learning_rate=0.3, max_bin=16)
    keys = generate_keypair(1024, allow_insecure=True)

    async def train() -> Federated:
        async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
            return await federate(
                c,
                X[:, GUEST_COLS],
                y.astype(np.float64),
                [X[:, HOST_COLS["b"]], X[:, HOST_COLS["c"]]],
                params,
                pool,
                keys,
            )

    with process_pool(2) as pool:
        fed = asyncio.run(train())
    folder = tmp_path_factory.mktemp("served")
    fed.guest.save(folder / "guest.json")
    for name, model in zip(fed.guest.hosts, fed.hosts, strict=True):
        model.save(folder / f"{name}.json")
    return Trained(fed, 1000 + np.arange(X.shape[0]), X, folder)
