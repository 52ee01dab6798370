"""The ``hetero`` benchmark's federation: guest and hosts, each in a spawned process of its own
with its own node and pool, over loopback WebSocket + mTLS, and the parent that starts them and
collects what they report (:func:`run_federation`). The ``modes``, ``scale``, ``scaleout`` and
``inference`` benchmarks run their federations with it too.

What a party may be asked besides training: to record its pool tasks while it trains (the task
trace the scaling prediction replays), to select a crypto kernel (through the environment it is
started with, since p2pboost reads it at import), to cut its work for more workers than it
runs processes, or to run its pool on a TLS Dask cluster (and have a worker killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lossless import HeteroSplit
from p2pboost.app._local import LocalParties, Report
from p2pboost.certs import TLSConfig
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.training.common import GuestPhase, HostPhase, Progress
from p2pboost.net.node import Node
from p2pboost.workers import PinnedPool, pinned_pool, pool_kind, process_pool, record_trace

__all__ = [
    "GUEST",
    "KERNELS",
    "KERNEL_ENV",
    "PARTY_TIMEOUT",
    "FederationResult",
    "PhaseClock",
    "active_kernel",
    "environment",
    "run_federation",
]

GUEST = "guest"
#: How long the parent waits for any one message of a party before giving up (seconds).
PARTY_TIMEOUT = 4 * 3600.0
#: The variable that selects the crypto kernel of a process when it imports p2pboost.
KERNEL_ENV = "P2PBOOST_KERNEL"
#: The kernels ``--compare-kernels`` runs, in this order.
KERNELS = ("native", "gmpy2")


def active_kernel() -> str:
    """The crypto kernel this process uses: ``p2pboost.crypto.kernels.active()`` where that
    module exists, else ``"gmpy2"`` (the only kernel there was before it)."""
    try:
        kernels: Any = importlib.import_module("p2pboost.crypto.kernels")
    except ImportError:
        return "gmpy2"
    return str(kernels.active())


def _gil_free() -> bool:
    """Whether this process's kernel releases the GIL (the native one): the pools a party's
    training would start are then threads (:func:`p2pboost.workers.pool_kind`)."""
    return active_kernel() == "native"


def pool_used() -> str:
    """What this process's training pools are made of: ``"threads"`` or ``"processes"``."""
    return pool_kind(_gil_free())


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """Set (a value) or leave as it is (None) variables of this process's environment for the
    block: processes started meanwhile (spawned parties, pools) inherit them."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is not None:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _trace_block(trace: str | None, party: str) -> contextlib.AbstractContextManager[Any]:
    """Record the party's pool tasks into ``trace`` for the block (nothing without one)."""
    return record_trace(trace, party=party) if trace else contextlib.nullcontext()


@dataclass
class PhaseClock(Progress):
    """A :class:`Progress` that adds up the wall seconds spent in each phase.

    ``enter`` charges the time since the previous ``enter`` to the phase being left, so the
    totals cover everything from construction to the last phase change (``done``, which the
    protocols enter when they return, is never left and so never charged).
    """

    seconds: dict[str, float] = field(default_factory=dict)
    #: Called with each phase entered and the tree (the scale-out benchmark kills a worker).
    hook: Callable[[GuestPhase | HostPhase, int], None] | None = None
    _mark: float = field(default_factory=time.perf_counter, init=False, repr=False)

    def enter(self, phase: GuestPhase | HostPhase, depth: int = -1) -> None:
        now = time.perf_counter()
        key = self.phase.value
        self.seconds[key] = self.seconds.get(key, 0.0) + (now - self._mark)
        self._mark = now
        super().enter(phase, depth)
        if self.hook is not None:
            self.hook(phase, self.tree)


# -- the parties (each runs in its own spawned process) ----------------------------------------


def _warm_pool(workers: int) -> Any:
    """The pool the guest's training would start (threads under the native kernel, else
    processes), its workers started (start-up is not part of training)."""
    pool = process_pool(workers, prefer_threads=_gil_free())
    list(pool.map(_import_task_modules, range(workers)))
    return pool


def _warm_pinned_pool(workers: int, places: int | None = None) -> PinnedPool:
    """The host's pinned pool (its row shards live there), started before training:
    ``places`` shards (default: one per worker) on ``workers`` processes (threads under the
    native kernel, as the host's training would start them)."""
    pool = pinned_pool(places or workers, processes=workers, prefer_threads=_gil_free())
    for future in [pool.submit_to(i, _import_task_modules) for i in range(pool.workers)]:
        future.result()
    return pool


def _compute(
    workers: int, compute: dict[str, Any] | None, pinned: bool, cut: int | None = None
) -> tuple[Any, Any]:
    """The party's executor, started and warmed: its pool (a host's with ``cut`` places,
    if given), or (``compute``: the TLS directories ``node`` and ``party`` of the party's
    cluster CA) a TLS ``LocalCluster`` of ``workers`` processes and a
    :class:`~p2pboost.workers.ClusterPool` on it. Returns the executor and what to close after
    it (the cluster, or None)."""
    if compute is None:
        return (_warm_pinned_pool(workers, cut) if pinned else _warm_pool(workers)), None
    from p2pboost.workers import connect_cluster, local_cluster

    cluster = local_cluster(workers, compute["node"])
    pool = connect_cluster(
        cluster.scheduler_address, compute["party"], key_workers=compute.get("key_workers")
    )
    pool.start()
    pool.client.run(_import_task_modules)  # as _warm_pool's and _warm_pinned_pool's workers
    return pool, cluster


def _import_task_modules(*_: object) -> None:
    """Import the modules whose tasks the workers run (start-up, not training)."""
    for module in ("p2pboost.crypto._workers", "p2pboost.hetero.training.shards"):
        importlib.import_module(module)


def _kill_a_worker_in_the_first_tree(pool: Any) -> Callable[[Any, int], None]:
    """A phase hook that kills (SIGKILL) the cluster worker of place 0 when the host starts the
    first layer of the first tree, once."""
    victim = pool.client.run(os.getpid)[pool.homes[0]]
    done: list[int] = []

    def hook(phase: Any, tree: int) -> None:
        if not done and phase is HostPhase.LAYER and tree == 0:
            done.append(victim)
            os.kill(victim, signal.SIGKILL)

    return hook


async def _host(
    report: Report,
    fed: str,
    name: str,
    X: np.ndarray,
    X_test: np.ndarray,
    workers: int,
    compute: dict[str, Any] | None = None,
    trace: str | None = None,
    cut: int | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from p2pboost.hetero.inference.batch import host_predict
    from p2pboost.hetero.training.host import host_train

    pool, cluster = _compute(workers, compute, pinned=True, cut=cut)
    try:
        async with Node(
            name,
            listen="wss://127.0.0.1:0",
            peers={GUEST: None},
            tls=TLSConfig.from_dir(Path(fed) / name),
        ) as node:
            report("address", node.address)
            # Start the clock when the guest dials (it trains right away), not while it boots.
            # The node has no public "connected" event, so poll its statistics.
            while not node.stats().peers[GUEST].connected:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            clock = PhaseClock(HostPhase.SETUP)
            if compute is not None and compute.get("kill"):
                clock.hook = _kill_a_worker_in_the_first_tree(pool)
            t0 = time.perf_counter()
            async with node.session("bench", peers=[GUEST]) as session:
                with _trace_block(trace, name):
                    model = await host_train(
                        session,
                        GUEST,
                        X,
                        executor=pool,
                        workers=cut or workers,
                        progress=clock,
                        **(options or {}),
                    )
            seconds = time.perf_counter() - t0
            async with node.session("bench-predict", peers=[GUEST]) as session:
                await host_predict(session, model, X_test)
    finally:
        pool.shutdown()
        if cluster is not None:
            cluster.close()
    moves = getattr(pool, "moves", 0)
    return {
        "seconds": seconds,
        "phases": clock.seconds,
        "model": model.to_dict(),
        "moves": moves,
        "kernel": active_kernel(),
        "pool": "cluster" if cluster is not None else pool_used(),
    }


async def _guest(
    report: Report,
    fed: str,
    addresses: dict[str, str],
    X: np.ndarray,
    y: np.ndarray,
    X_test: np.ndarray,
    params: dict[str, Any],
    key_bits: int,
    workers: int,
    scheme: str,
    modes: dict[str, Any] | None = None,
    compute: dict[str, Any] | None = None,
    trace: str | None = None,
    cut: int | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from p2pboost.crypto.engine import CryptoEngine
    from p2pboost.crypto.keys import make_keypair
    from p2pboost.hetero.config import HeteroConfig
    from p2pboost.hetero.inference.batch import guest_predict
    from p2pboost.hetero.training.guest import guest_train

    hosts = sorted(addresses)
    insecure = key_bits < 2048
    t0 = time.perf_counter()
    keys = make_keypair(scheme, key_bits, allow_insecure=insecure)
    keygen = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool, cluster = _compute(workers, compute, pinned=False)
    pool_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    await CryptoEngine(*keys, executor=pool, workers=workers).prepare()
    tables = time.perf_counter() - t0
    config = replace(
        HeteroConfig(key_bits=key_bits, allow_insecure_key=insecure, scheme=scheme, workers=cut),
        **(modes or {}),
    )
    try:
        async with Node(GUEST, peers=addresses, tls=TLSConfig.from_dir(Path(fed) / GUEST)) as node:
            async with node.session("bench", peers=hosts) as session:
                before = node.stats().peers
                clock = PhaseClock(GuestPhase.SETUP)
                with _trace_block(trace, GUEST):
                    wall_start, t0 = time.time(), time.perf_counter()
                    model = await guest_train(
                        session,
                        hosts,
                        X,
                        y,
                        BoostParams.from_dict(params),
                        config=config,
                        executor=pool,
                        keys=keys,
                        progress=clock,
                        **(options or {}),
                    )
                    seconds, wall_stop = time.perf_counter() - t0, time.time()
                after = node.stats().peers
            traffic = sum(
                after[h].bytes_sent
                + after[h].bytes_received
                - before[h].bytes_sent
                - before[h].bytes_received
                for h in hosts
            )
            async with node.session("bench-predict", peers=hosts) as session:
                margin = await guest_predict(session, model, X_test)
    finally:
        pool.shutdown()
        if cluster is not None:
            cluster.close()
    return {
        "seconds": seconds,
        "phases": clock.seconds,
        "bytes": traffic,
        "keygen": keygen,
        "pool_start": pool_start,
        "tables": tables,
        "model": model.to_dict(),
        "proba": model.transform(margin),
        "wall": (wall_start, wall_stop),
        "kernel": active_kernel(),
        "pool": "cluster" if cluster is not None else pool_used(),
    }


# -- the parent: spawn, wire, collect ----------------------------------------------------------


@dataclass(frozen=True)
class FederationResult:
    """What the parties reported: the guest's dict and each host's, in host order."""

    guest: dict[str, Any]
    hosts: list[dict[str, Any]]


def run_federation(
    fed: Path,
    split: HeteroSplit,
    host_blocks: list[np.ndarray],
    params: BoostParams,
    *,
    key_bits: int,
    workers: int,
    scheme: str = "paillier",
    modes: dict[str, Any] | None = None,
    compute: dict[str, dict[str, Any]] | None = None,
    trace: str | None = None,
    kernel: str | None = None,
    cut: int | None = None,
    guest_options: dict[str, Any] | None = None,
    host_options: list[dict[str, Any]] | None = None,
) -> FederationResult:
    """Train and predict once, guest and every host in its own spawned process (``modes``:
    :class:`~p2pboost.hetero.config.HeteroConfig`'s mode settings, e.g. ``host_depth``;
    ``compute``: party -> its cluster's settings, see :func:`_compute`; ``trace``: a
    directory where every party records its pool tasks while it trains; ``kernel``: the
    crypto kernel the parties select, through :data:`KERNEL_ENV`, when they start; ``cut``:
    the workers the parties cut their work for, on ``workers`` processes each: a host's
    shards, the engine's pieces and chunks in flight; None: as many as they have;
    ``guest_options``/``host_options``: more keyword arguments of ``guest_train`` and of each
    host's ``host_train``, e.g. feature names and constraints)."""
    compute = compute or {}
    names = [f"host{k}" for k in range(1, len(host_blocks) + 1)]
    with (
        environment(**{KERNEL_ENV: kernel}),
        LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties,
    ):
        per_host = host_options or [{} for _ in names]
        for name, block, options in zip(names, host_blocks, per_host, strict=True):
            parties.start(
                name,
                _host,
                fed=str(fed),
                name=name,
                X=split.host_train[:, block],
                X_test=split.host_test[:, block],
                workers=workers,
                compute=compute.get(name),
                trace=trace,
                cut=cut,
                options=options,
            )
        addresses = {name: parties.expect(name, "address") for name in names}
        parties.start(
            GUEST,
            _guest,
            fed=str(fed),
            addresses=addresses,
            X=split.guest_train,
            y=split.y_train,
            X_test=split.guest_test,
            params=params.to_dict(),
            key_bits=key_bits,
            workers=workers,
            scheme=scheme,
            modes=modes,
            compute=compute.get(GUEST),
            trace=trace,
            cut=cut,
            options=guest_options,
        )
        results = parties.wait()
    guest, hosts = results[GUEST], [results[name] for name in names]
    return FederationResult(guest, hosts)
