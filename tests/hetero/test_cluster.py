"""A party's compute on a real Dask cluster: a 2-worker ``LocalCluster`` talking mutual TLS.

Vertical training on the cluster gives the trees of the local pool (and of the plaintext
core), also when a worker is killed with SIGKILL in the middle of a tree; PSI through the
cluster finds the intersection; a client without a certificate of the cluster's CA is refused.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import distributed  # the dask extra is part of [dev]: no skipping without it
import numpy as np
import pytest

from p2pboost import certs
from p2pboost.exceptions import ClusterError, WorkerStateLost
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.training.common import HostPhase, Progress
from p2pboost.protocols.psi import psi_guest, psi_host
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from p2pboost.workers import ClusterPool, Log, cluster_security, connect_cluster, stateful
from tests.hetero.conftest import Keys, assert_same_trees, federate


@pytest.fixture(scope="module")
def cluster_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's own CA (identities ``node`` and ``party``) and, apart, a stranger's."""
    out = tmp_path_factory.mktemp("cluster-certs")
    certs.init(out / "own", ["node", "party"])
    certs.init(out / "other", ["stranger"])
    return out


@pytest.fixture(scope="module")
def cluster(cluster_certs: Path) -> Iterator[Any]:
    from p2pboost.workers import local_cluster

    with local_cluster(2, cluster_certs / "own" / "node") as running:
        yield running


@pytest.fixture
def dask_pool(cluster: Any, cluster_certs: Path) -> Iterator[ClusterPool]:
    pool = connect_cluster(cluster.scheduler_address, cluster_certs / "own" / "party")
    try:
        yield pool
    finally:
        pool.shutdown()


# -- the executor's own rules, on stateful kernels of this module ------------------------------

_STATES: dict[str, list[int]] = {}


@stateful(Log.START)
def _open(name: str) -> int:
    _STATES[name] = []
    return os.getpid()


@stateful(Log.APPEND)
def _push(name: str, value: int) -> list[int]:
    try:
        state = _STATES[name]
    except KeyError:
        raise WorkerStateLost("no state") from None
    state.append(value)
    return list(state)


@stateful(Log.REWIND)
def _rewind(name: str) -> None:
    _STATES[name] = []


def _pid() -> int:
    return os.getpid()


def test_a_place_runs_its_tasks_in_order_and_rebuilds_a_lost_state(
    dask_pool: ClusterPool,
) -> None:
    pids = [dask_pool.submit_to(i, _open, f"s{i}").result() for i in range(dask_pool.workers)]
    assert len(set(pids)) == 2  # one place per worker
    futures = [dask_pool.submit_to(0, _push, "s0", v) for v in range(50)]
    assert futures[-1].result() == list(range(50))
    dask_pool.submit_to(0, _rewind, "s0").result()
    assert dask_pool.submit_to(0, _push, "s0", 7).result() == [7]
    # The worker of place 0 dies: the next task finds its state rebuilt elsewhere, then goes on.
    home = dask_pool.homes[0]
    os.kill(pids[0], signal.SIGKILL)  # a local cluster: its workers are our grandchildren
    assert dask_pool.submit_to(0, _push, "s0", 8).result(timeout=60) == [7, 8]
    assert dask_pool.homes[0] != home
    assert dask_pool.submit_to(0, _pid).result() != pids[0]


def test_a_cluster_refuses_a_client_without_its_certificate(
    cluster: Any, cluster_certs: Path
) -> None:
    with pytest.raises(ClusterError, match="cannot reach the compute cluster"):
        connect_cluster(cluster.scheduler_address, cluster_certs / "other" / "stranger", timeout=5)
    plain = cluster.scheduler_address.replace("tls://", "tcp://")
    with pytest.raises((OSError, TimeoutError)):
        distributed.Client(plain, timeout=5, set_as_default=False)
    with pytest.raises(Exception, match="tls"):
        connect_cluster(plain, cluster_certs / "own" / "party")


def test_cluster_security_names_a_missing_file(tmp_path: Path) -> None:
    from p2pboost.exceptions import ConfigError

    with pytest.raises(ConfigError, match="cluster TLS file not found"):
        cluster_security(tmp_path)


# -- the protocols on the cluster --------------------------------------------------------------


async def _train(
    breast: tuple[np.ndarray, np.ndarray],
    guest_executor: Any,
    host_executor: Any,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
    on_layer: Any = None,
) -> list[Any]:
    """Breast cancer, guest 10 columns and host 20; each party on its own executor."""
    from p2pboost.hetero.training.host import host_train

    X, y = breast
    real = host_train

    class Watch(Progress):
        def enter(self, phase: HostPhase, depth: int = -1) -> None:  # type: ignore[override]
            super().enter(phase, depth)
            if on_layer is not None and phase is HostPhase.LAYER and self.tree == 0:
                on_layer()

    async def on_cluster(session: Any, guest: str, X: Any, **kwargs: Any) -> Any:
        kwargs.update(executor=host_executor, workers=None, progress=Watch(HostPhase.SETUP))
        return await real(session, guest, X, **kwargs)

    monkeypatch.setattr("tests.hetero.conftest.host_train", on_cluster)
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, guest_executor, keys)
    trees = fed.joined()
    assert_same_trees(trees, train(params, X, y))
    return trees


@pytest.mark.slow
async def test_training_on_the_cluster_gives_the_pools_trees_even_when_a_worker_dies(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    dask_pool: ClusterPool,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both parties on the cluster (through the Dask client), then the pools' trees.
    on_cluster = await _train(breast, dask_pool.client, dask_pool.client, keys, monkeypatch)
    on_pool = await _train(breast, pool, pool, keys, monkeypatch)
    for a, b in zip(on_cluster, on_pool, strict=True):
        np.testing.assert_array_equal(a.value, b.value)
    # The host's first worker is killed in the middle of the first tree (its first layer).
    pids = dask_pool.client.run(os.getpid)
    victim = pids[dask_pool.homes[0]]
    killed: list[int] = []

    def kill() -> None:
        if not killed:
            killed.append(victim)
            os.kill(victim, signal.SIGKILL)

    await _train(breast, dask_pool.client, dask_pool, keys, monkeypatch, kill)
    assert killed
    assert dask_pool.moves >= 1  # the shard was rebuilt on a live worker


async def test_psi_on_the_cluster_finds_the_intersection(dask_pool: ClusterPool) -> None:
    ours = [f"id{i}" for i in range(0, 3000)]
    theirs = [f"id{i}" for i in range(1500, 5000)]
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:

        async def guest() -> Any:
            async with c["a"].session("psi", peers=["b"]) as s:
                return await psi_guest(s, ["b"], ours, executor=dask_pool.client)

        async def host() -> Any:
            async with c["b"].session("psi", peers=["a"]) as s:
                return await psi_host(s, "a", theirs, executor=dask_pool.client)

        g, h = await asyncio.gather(guest(), host())
    expected = sorted(set(ours) & set(theirs))
    assert sorted(ours[i] for i in g.positions) == expected
    assert sorted(theirs[i] for i in h.positions) == expected


async def test_a_chunk_is_encrypted_in_pieces_on_the_cluster(
    dask_pool: ClusterPool, keys: Keys
) -> None:
    """The guest's engine on a cluster cuts a chunk where it holds more than 1/(4W) of its
    tree, with the cluster's larger floor: 2,048 rows of a 2,048-row tree on two workers are
    two pieces of 1,024, which decrypt to the packed rows in order; a chunk within the bound
    stays whole."""
    from p2pboost.crypto.additive import CiphertextBatch
    from p2pboost.crypto.engine import CryptoEngine
    from p2pboost.crypto.packing import PackingSpec, pack
    from p2pboost.gbdt.fixedpoint import choose_grid

    public_key, private_key = keys
    rows = 2048
    rng = np.random.default_rng(11)
    g, h = rng.integers(-(2**19), 2**19, rows), rng.integers(0, 2**19, rows)
    grid = choose_grid(np.array([2.0**20]), rows)
    spec = PackingSpec.for_grids(rows, grid, grid, key_bits=public_key.bits)
    engine = CryptoEngine(public_key, private_key, executor=dask_pool, workers=2)
    assert engine.piece_cuts(rows, 1, rows) == [0, 1024, 2048]
    assert engine.piece_cuts(1000, 1, rows) == [0, 1000]  # under the floor: one task
    assert engine.piece_cuts(rows, 1, 100_000) == [0, rows]  # within 1/(4W) of its tree
    data = await engine.encrypt_packed(spec, g, h, stream_rows=rows)
    cts = CiphertextBatch.of(public_key, data).ciphertexts(public_key)
    assert [private_key.decrypt(c) for c in cts] == pack(spec, g, h)[0]


def test_a_lost_scheduler_fails_the_tasks_with_a_clear_error(cluster_certs: Path) -> None:
    from p2pboost.workers import local_cluster

    running = local_cluster(1, cluster_certs / "own" / "node")
    security = cluster_security(cluster_certs / "own" / "party")
    # timeout: how long the client tries to reconnect before it gives up (default 30 s)
    client = distributed.Client(running.scheduler_address, security=security, timeout=3)
    pool = ClusterPool(client, owns_client=True, move_timeout=2.0)  # no worker will come back
    try:
        assert pool.submit(_pid).result(timeout=30) > 0
        address = running.scheduler_address
        running.close()  # the scheduler and its worker go away
        with pytest.raises(ClusterError, match=address.split("://")[1]):
            pool.submit(_pid).result(timeout=60)
        with pytest.raises(ClusterError, match="lost a worker or the scheduler"):
            pool.submit_to(0, _push, "gone", 1).result(timeout=30)
    finally:
        pool.shutdown()


def test_key_tasks_run_only_on_the_named_key_workers(cluster: Any, cluster_certs: Path) -> None:
    security = cluster_security(cluster_certs / "own" / "party")
    client = distributed.Client(cluster.scheduler_address, security=security)
    pids = client.run(os.getpid)
    trusted = sorted(pids)[0]
    pool = ClusterPool(client, owns_client=True, key_workers=[trusted])
    try:
        keyholder = pool.keyholder()
        assert keyholder is not pool
        ran = {keyholder.submit(_pid).result(timeout=30) for _ in range(8)}
        assert ran == {pids[trusted]}
    finally:
        pool.shutdown()
