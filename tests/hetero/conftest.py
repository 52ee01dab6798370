"""Shared pieces of the hetero tests: a process pool, a 1024-bit key pair, data, federations.

Party ids follow the node test cluster's CA: ``a`` is the guest, ``b`` and ``c`` are hosts.
1024-bit keys (explicit opt-in) keep the suite fast; the protocol is key-size agnostic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from p2pboost import certs
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.crypto.paillier import generate_keypair
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.inference.batch import guest_predict, host_predict
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.common import Progress
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import LocalFederation
from p2pboost.workers import pinned_pool, process_pool
from tests._tiny_data import write_tiny_vertical

Keys = tuple[AnyPublicKey, AnyPrivateKey]

CONFIG = HeteroConfig(key_bits=1024, allow_insecure_key=True, chunk_rows=128)


@pytest.fixture(scope="session")
def pool() -> Iterator[Executor]:
    """A pinned pool: the guest uses it as an executor, hosts keep their row shards in it."""
    with pinned_pool(2) as executor:
        executor.start()  # start the workers once for the whole session
        yield executor


@pytest.fixture(scope="session")
def plain_pool() -> Iterator[Executor]:
    """An ordinary process pool: hosts then start pinned workers of their own."""
    with process_pool(2) as executor:
        list(executor.map(abs, range(2)))
        yield executor


@pytest.fixture(scope="session")
def keys() -> Keys:
    return generate_keypair(1024, allow_insecure=True)


@pytest.fixture(scope="session")
def ou_keys() -> Keys:
    return make_keypair("ou", 1024, allow_insecure=True)


@pytest.fixture(scope="session")
def breast() -> tuple[np.ndarray, np.ndarray]:
    """Breast cancer data with 8% of the values missing (NaN)."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = X.copy()
    X[np.random.default_rng(0).random(X.shape) < 0.08] = np.nan
    return X, y.astype(np.float64)


@dataclass
class Federated:
    guest: GuestModel
    hosts: list[HostModel]

    def joined(self) -> list[Tree]:
        return joined_trees(self.guest, self.hosts)


async def federate(
    c: LocalFederation,
    X_guest: np.ndarray,
    y: np.ndarray,
    X_hosts: Sequence[np.ndarray],
    params: BoostParams,
    pool: Executor,
    keys: Keys,
    *,
    eval_guest: Sequence[tuple[np.ndarray, np.ndarray]] = (),
    eval_hosts: Sequence[Sequence[np.ndarray]] | None = None,
    callbacks: Sequence[Any] = (),
    progress: Progress | None = None,
    session: str = "train",
    config: HeteroConfig = CONFIG,
    sample_weight: np.ndarray | None = None,
    dp_replay: bool = False,
) -> Federated:
    """Train guest ``a`` with hosts ``b`` (and ``c``) of cluster ``c``."""
    hosts = ["b", "c"][: len(X_hosts)]

    async def guest() -> GuestModel:
        async with c["a"].session(session, peers=hosts) as s:
            return await guest_train(
                s,
                hosts,
                X_guest,
                y,
                params,
                eval_sets=eval_guest,
                callbacks=callbacks,
                config=config,
                executor=pool,
                keys=keys,
                progress=progress,
                sample_weight=sample_weight,
            )

    async def host(h: str, X: np.ndarray, ev: Sequence[np.ndarray]) -> HostModel:
        async with c[h].session(session, peers=["a"]) as s:
            return await host_train(
                s, "a", X, eval_sets=ev, executor=pool, workers=2, dp_replay=dp_replay
            )

    evs = eval_hosts if eval_hosts is not None else [[] for _ in X_hosts]
    results = await asyncio.gather(
        guest(), *(host(h, X, ev) for h, X, ev in zip(hosts, X_hosts, evs, strict=True))
    )
    guest_model, *host_models = results
    return Federated(cast(GuestModel, guest_model), cast(list[HostModel], host_models))


async def predict(
    c: LocalFederation, fed: Federated, X_guest: np.ndarray, X_hosts: Sequence[np.ndarray]
) -> np.ndarray:
    """Federated raw margins for aligned rows, through the prediction protocol."""
    hosts = list(fed.guest.hosts)

    async def guest() -> np.ndarray:
        async with c["a"].session("predict", peers=hosts) as s:
            return await guest_predict(s, fed.guest, X_guest)

    async def host(h: str, model: HostModel, X: np.ndarray) -> None:
        async with c[h].session("predict", peers=["a"]) as s:
            await host_predict(s, model, X)

    out = await asyncio.gather(
        guest(), *(host(h, m, X) for h, m, X in zip(hosts, fed.hosts, X_hosts, strict=True))
    )
    return np.asarray(out[0])


def assert_same_trees(ours: list[Tree], core: Booster) -> None:
    """Tree for tree: structure, split features, bins, directions and leaf values."""
    assert len(ours) == len(core.trees)
    for t, (a, b) in enumerate(zip(ours, core.trees, strict=True)):
        internal = b.feature >= 0
        assert a.n_nodes == b.n_nodes, t
        np.testing.assert_array_equal(a.feature, b.feature, err_msg=f"tree {t}")
        np.testing.assert_array_equal(a.left, b.left, err_msg=f"tree {t}")
        np.testing.assert_array_equal(a.right, b.right, err_msg=f"tree {t}")
        np.testing.assert_array_equal(a.threshold_bin[internal], b.threshold_bin[internal])
        np.testing.assert_array_equal(a.default_left[internal], b.default_left[internal])
        np.testing.assert_array_equal(a.threshold[internal], b.threshold[internal])
        np.testing.assert_array_equal(a.value[~internal], b.value[~internal])
        np.testing.assert_array_equal(a.gain[internal], b.gain[internal])


@pytest.fixture(scope="session")
def federation_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throw-away CA and certificates for parties a, b and c."""
    out = tmp_path_factory.mktemp("hetero-federation")
    certs.init(out, ["a", "b", "c"])
    return out


@pytest.fixture
def tiny_vertical(tmp_path: Path) -> Path:
    """300 rows; the label needs a guest and a host feature, host rows in another order."""
    return write_tiny_vertical(tmp_path, rows=300, guest=2, host=3, host_label_column=2)
