"""Hetero SecureBoost end to end: guest and hosts as separate processes over WebSocket + mTLS.

``python -m benchmarks hetero --dataset synth150k --trees 5 --depth 5 --key-bits 1024
[--hosts 1] [--bins 32 --lr 0.3 --seed 0 --workers W --rows N --data-dir DIR]
[--scheme paillier|ou | --compare-schemes] [--compare-kernels]
[--bandwidth-gbps 10 --trace-workers N]``

The guest holds ``NAME_hetero_guest.csv`` (labels and its features); the host features of
``NAME_hetero_host.csv`` go to one host, or are split column-wise into ``--hosts`` contiguous
blocks (host 1 first), as in ``lossless --mode hetero``. Rows are joined on ``id`` and split
2/3 : 1/3 by :func:`benchmarks.lossless.load_hetero_split`; ``--rows N`` keeps only the first
``N`` training rows (the test rows stay).

Every party is its own spawned process with its own node, its own pool of ``--workers``
crypto workers (default: one per core; a host's is a :class:`~p2pboost.workers.PinnedPool`,
where its row shards of ciphertexts live) and a throw-away certificate from a federation CA;
they talk over TLS 1.3 WebSockets on 127.0.0.1 (the hosts listen, the guest, whose id sorts
first, dials). So the run pays for what a real deployment pays: encoding,
framing, TLS, the kernel's loopback and the parties competing for the same cores.

What is timed, and what is not:

* ``s_per_tree``: the guest's wall time inside ``guest_train`` divided by the trees. The key
  pair is generated, the pools are started (warmed) and the guest's workers build the key's
  fixed-base tables (:meth:`~p2pboost.crypto.engine.CryptoEngine.prepare`) *before* that, as
  a party that has its keys before its partners are ready would have them; each is reported
  on its own line of the table, the tables also as ``tables_s`` (add it to the trees' time
  for a party that makes its key on the spot). While the guest waits
  for the host its pool makes the next tree's encryption randomisers on processors the host
  leaves idle (``HeteroConfig.precompute``), so from the second tree on part of the
  encryption is done ahead; all of it is inside the timed span.
* ``phases``: per party, the wall seconds spent in each protocol phase (a
  :class:`~p2pboost.hetero._common.Progress` that clocks every ``enter``). Wall
  time includes waiting for the other side, so a host's ``layer`` also holds the time the
  guest spends deciding. A host's clock starts when the guest's connection arrives.
* ``floor_s_per_tree``: DESIGN.md section 2's cost model (encryptions, ciphertext
  additions, compressions and decryptions per tree, each timed on one core in this run, once
  before and once after the federation, the cheaper of the two kept) divided by the cores:
  the time if every core did nothing but the unavoidable cryptography (see
  :class:`benchmarks._hetero_lossless.CostModel`).
* ``bytes_per_tree``: bytes the guest's node sent and received (all hosts, framing included)
  during training, divided by the trees.
* ``scaling``: every pool task of both parties while they train is recorded (the task
  trace, :mod:`p2pboost.workers._trace`) and replayed by list scheduling with each party on a
  machine of its own with 8, 16, 32 and 64 workers (:mod:`benchmarks._schedule` states the
  model): predicted seconds per tree and parallel efficiency. ``--trace-workers N`` has the
  parties cut their work for ``N`` workers (a host's shards, the engine's pieces) while they
  run it on ``--workers`` processes, so the trace holds the tasks of an ``N``-worker party.
* ``--compare-kernels``: each scheme with the ``native`` and the ``gmpy2`` crypto kernel,
  selected in the parties by ``P2PBOOST_KERNEL`` before they import p2pboost; the floor of a
  run is timed with its kernel (in a process started with the same setting), and each run
  reports the kernel its parties actually used.
* ``auc``: the federated model on the test rows through the one-round prediction protocol
  (:mod:`p2pboost.hetero.predict`) over the same nodes; ``xgboost_auc``: xgboost
  ``hist`` with the same trees, depth, bins, learning rate and lambda, one thread, trained
  on the joined training rows in this run.

Binary labels only (the key is ``auc``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import multiprocessing
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _scaling
from benchmarks._common import data_dir, emit_json, print_table
from benchmarks._hetero_lossless import CostModel, _candidates, _scored_nodes, compare_trees
from benchmarks.lossless import (
    DATASETS,
    HeteroSplit,
    Task,
    _params,
    _predict_xgb,
    _xgboost_model,
    load_hetero_split,
)
from p2pboost import certs
from p2pboost.app._local import LocalParties, Report
from p2pboost.certs import TLSConfig
from p2pboost.crypto.keys import SCHEMES
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.metrics import auc
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero._common import GuestPhase, HostPhase, Progress
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.net.node import Node
from p2pboost.workers import PinnedPool, default_workers, pinned_pool, process_pool, record_trace

__all__ = ["PhaseClock", "main", "run_federation"]

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


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
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
    """A process pool whose workers have started (start-up is not part of training)."""
    pool = process_pool(workers)
    list(pool.map(_import_task_modules, range(workers)))
    return pool


def _warm_pinned_pool(workers: int, places: int | None = None) -> PinnedPool:
    """The host's pinned pool (its row shards live there), started before training:
    ``places`` shards (default: one per worker) on ``workers`` processes."""
    pool = pinned_pool(places or workers, processes=workers)
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
    for module in ("p2pboost.crypto._workers", "p2pboost.hetero._kernels"):
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
) -> dict[str, Any]:
    from p2pboost.hetero.predict import host_predict
    from p2pboost.hetero.train import host_train

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
                        session, GUEST, X, executor=pool, workers=cut or workers, progress=clock
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
) -> dict[str, Any]:
    from p2pboost.crypto.engine import CryptoEngine
    from p2pboost.crypto.keys import make_keypair
    from p2pboost.hetero.predict import guest_predict
    from p2pboost.hetero.train import HeteroConfig, guest_train

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
) -> FederationResult:
    """Train and predict once, guest and every host in its own spawned process (``modes``:
    :class:`~p2pboost.hetero.train.HeteroConfig`'s mode settings, e.g. ``host_depth``;
    ``compute``: party -> its cluster's settings, see :func:`_compute`; ``trace``: a
    directory where every party records its pool tasks while it trains; ``kernel``: the
    crypto kernel the parties select, through :data:`KERNEL_ENV`, when they start; ``cut``:
    the workers the parties cut their work for, on ``workers`` processes each: a host's
    shards, the engine's pieces and chunks in flight; None: as many as they have)."""
    compute = compute or {}
    names = [f"host{k}" for k in range(1, len(host_blocks) + 1)]
    with (
        _environment(**{KERNEL_ENV: kernel}),
        LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties,
    ):
        for name, block in zip(names, host_blocks, strict=True):
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
        )
        results = parties.wait()
    guest, hosts = results[GUEST], [results[name] for name in names]
    return FederationResult(guest, hosts)


def _phases(result: FederationResult, n_hosts: int) -> dict[str, dict[str, float]]:
    names = [GUEST, *(f"host{k}" for k in range(1, n_hosts + 1))]
    reports: list[Mapping[str, Any]] = [result.guest, *result.hosts]
    return {
        name: {phase: round(float(s), 4) for phase, s in report["phases"].items()}
        for name, report in zip(names, reports, strict=True)
    }


def _least(a: CostModel, b: CostModel) -> CostModel:
    """Per operation the cheaper of two measurements (before and after the federation).

    The machine is shared, so a measurement can be slowed by someone else's work; the least
    cost is the closest to the uncontended one, which makes the floor the harder target.
    """
    return CostModel(
        encrypt=min(a.encrypt, b.encrypt),
        add=min(a.add, b.add),
        compress=min(a.compress, b.compress),
        decrypt=min(a.decrypt, b.decrypt),
        capacity=a.capacity,
    )


def _measured_in(kernel: str, key_bits: int, n_rows: int, scheme: str) -> tuple[CostModel, str]:
    """:meth:`CostModel.measure` in this process, and the kernel it used (run in a process
    started with the kernel selected: see :func:`_measure_costs`)."""
    return CostModel.measure(key_bits, n_rows, scheme=scheme), active_kernel()


def _measure_costs(key_bits: int, n_rows: int, scheme: str, kernel: str | None) -> CostModel:
    """The per-operation costs of the floor, timed with the parties' kernel.

    With no kernel chosen the parties use the one this process would (they inherit its
    environment), so it is timed here. A chosen kernel is selected when p2pboost is imported,
    so it is timed in a fresh process started with it (one process, one core: the same
    measurement; only its start-up is added, untimed)."""
    if kernel is None:
        return CostModel.measure(key_bits, n_rows, scheme=scheme)
    context = multiprocessing.get_context("spawn")
    with _environment(**{KERNEL_ENV: kernel}), ProcessPoolExecutor(1, context) as one:
        costs, used = one.submit(_measured_in, kernel, key_bits, n_rows, scheme).result()
    if used != kernel:
        print(f"note: the floor for kernel {kernel!r} was timed with {used!r}, what p2pboost used")
    return costs


@dataclass(frozen=True)
class SchemeRun:
    """One federation under one scheme and kernel: what was measured, and the models."""

    scheme: str
    #: The kernel asked for (None: the default) and the one the parties used.
    kernel: str | None
    kernel_used: str
    s_per_tree: float
    floor: float
    costs: CostModel
    scored: float
    layers: float
    auc: float
    bytes_per_tree: float
    phases: dict[str, dict[str, float]]
    result: FederationResult
    trees: list[Tree]
    #: The run's task trace replayed on wider machines (benchmarks/_schedule.py).
    prediction: _scaling.Prediction

    @property
    def label(self) -> str:
        return self.scheme if self.kernel is None else f"{self.scheme}/{self.kernel}"

    def json(self) -> dict[str, Any]:
        return {
            "s_per_tree": round(self.s_per_tree, 4),
            "floor_s_per_tree": round(self.floor, 4),
            "tables_s": round(self.result.guest["tables"], 4),
            "auc": round(self.auc, 6),
            "bytes_per_tree": round(self.bytes_per_tree),
            "kernel": self.kernel_used,
        }


def _run_scheme(
    args: argparse.Namespace,
    split: HeteroSplit,
    blocks: list[np.ndarray],
    params: BoostParams,
    scheme: str,
    workers: int,
    kernel: str | None = None,
) -> SchemeRun:
    """Cost model before, the federation (its pool tasks traced), cost model after (the
    cheaper kept per operation); ``kernel``: the crypto kernel of the parties and of the
    floor's timing (None: the default)."""
    n_rows = int(split.y_train.size)
    costs_before = _measure_costs(args.key_bits, n_rows, scheme, kernel)
    with tempfile.TemporaryDirectory(prefix="p2pboost-hetero-") as tmp:
        fed = Path(tmp) / "federation"
        trace = Path(tmp) / "trace"
        certs.init(fed, [GUEST, *(f"host{k}" for k in range(1, args.hosts + 1))])
        result = run_federation(
            fed,
            split,
            blocks,
            params,
            key_bits=args.key_bits,
            workers=workers,
            scheme=scheme,
            trace=str(trace),
            kernel=kernel,
            cut=getattr(args, "trace_workers", None),
        )
        g = result.guest
        model = GuestModel.from_dict(g["model"])
        n_trees = max(1, len(model.trees))
        start, stop = g["wall"]
        prediction = _scaling.predict(
            trace,
            start=start,
            stop=stop,
            units=n_trees,
            workers=getattr(args, "trace_workers", None) or workers,
            bandwidth=_scaling.bandwidth(getattr(args, "bandwidth_gbps", _scaling.DEFAULT_GBPS)),
        )
    hosts = [HostModel.from_dict(h["model"]) for h in result.hosts]
    costs = _least(costs_before, _measure_costs(args.key_bits, n_rows, scheme, kernel))
    scored, layers = _scored_nodes(model, args.depth)
    floor = costs.floor(
        n_rows,
        split.host_train.shape[1],
        round(layers),
        round(scored),
        _candidates(split.host_train, args.bins),
        default_workers(),
    )
    used = {g["kernel"], *(h["kernel"] for h in result.hosts)}
    return SchemeRun(
        scheme=scheme,
        kernel=kernel,
        kernel_used="+".join(sorted(used)),
        s_per_tree=g["seconds"] / n_trees,
        floor=floor,
        costs=costs,
        scored=scored,
        layers=layers,
        auc=float(auc(split.y_test, g["proba"])),
        bytes_per_tree=g["bytes"] / n_trees,
        phases=_phases(result, args.hosts),
        result=result,
        trees=joined_trees(model, hosts),
        prediction=prediction,
    )


def _rows(run: SchemeRun) -> list[tuple[str, Any]]:
    c = run.costs
    rows: list[tuple[str, Any]] = [
        (f"[{run.label}] crypto kernel used (guest + hosts)", run.kernel_used),
        (f"[{run.label}] guest key generation s (not timed)", run.result.guest["keygen"]),
        (f"[{run.label}] guest workers' tables s (not timed)", run.result.guest["tables"]),
        (f"[{run.label}] federated s/tree (guest wall)", run.s_per_tree),
        (f"[{run.label}] floor s/tree (cost model / cores)", run.floor),
        (f"[{run.label}] s_per_tree / floor_s_per_tree", run.s_per_tree / run.floor),
        (
            f"[{run.label}]   encrypt / add / compress / decrypt (us)",
            " / ".join(f"{1e6 * v:.1f}" for v in (c.encrypt, c.add, c.compress, c.decrypt)),
        ),
        (f"[{run.label}]   split-infos per decryption", c.capacity),
        (
            f"[{run.label}]   scored nodes / layers per tree",
            f"{run.scored:.1f} / {run.layers:.1f}",
        ),
    ]
    for party, per_phase in run.phases.items():
        total = sum(per_phase.values())
        shown = ", ".join(f"{k} {v:.2f}" for k, v in per_phase.items())
        rows.append((f"[{run.label}] {party} phases s (total {total:.2f})", shown))
    rows += [
        (f"[{run.label}] MB per tree (guest sent + received)", run.bytes_per_tree / 1e6),
        (f"[{run.label}] test AUC (federated, prediction protocol)", run.auc),
    ]
    return rows + _scaling.rows(f"[{run.label}]", run.prediction, run.s_per_tree, "tree")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks hetero",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--key-bits", type=int, default=2048, choices=[1024, 2048, 3072])
    parser.add_argument("--scheme", default="paillier", choices=SCHEMES)
    parser.add_argument(
        "--compare-schemes",
        action="store_true",
        help="run Paillier, then OU, back to back, and check both grow the core's trees",
    )
    parser.add_argument(
        "--compare-kernels",
        action="store_true",
        help=f"run each scheme with each crypto kernel ({', '.join(KERNELS)}; "
        f"${KERNEL_ENV} in the parties), and check every run grows the core's trees",
    )
    parser.add_argument("--trees", type=int, default=5)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=None, help="first N training rows only")
    parser.add_argument(
        "--workers", type=int, default=None, help="crypto processes per party (default: cores)"
    )
    parser.add_argument("--data-dir", default=None)
    _scaling.add_bandwidth_argument(parser)
    _scaling.add_trace_workers_argument(parser)
    args = parser.parse_args(argv)
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    if split.task is not Task.BINARY:
        parser.error(f"{args.dataset} is not a binary task (this benchmark reports AUC)")
    if not 1 <= args.hosts <= split.host_train.shape[1]:
        parser.error("--hosts must be between 1 and the number of host features")
    if args.rows is not None:
        if args.rows < 2:
            parser.error("--rows must be at least 2")
        n = args.rows
        split = replace(
            split,
            guest_train=split.guest_train[:n],
            host_train=split.host_train[:n],
            y_train=split.y_train[:n],
        )
    cores = default_workers()
    workers = args.workers or cores
    if workers < 1:
        parser.error("--workers must be at least 1")
    if args.trace_workers is not None and args.trace_workers < 1:
        parser.error("--trace-workers must be at least 1")
    params = _params(args, split)
    blocks = np.array_split(np.arange(split.host_train.shape[1]), args.hosts)
    n_rows = int(split.y_train.size)
    load_before = os.getloadavg()[0]
    schemes = list(SCHEMES) if args.compare_schemes else [args.scheme]
    kernels: list[str | None] = list(KERNELS) if args.compare_kernels else [None]
    # A scheme's kernels back to back: their ratio is the one compared, and this machine drifts.
    runs = [
        _run_scheme(args, split, blocks, params, scheme, workers, kernel)
        for scheme in schemes
        for kernel in kernels
    ]

    t0 = time.perf_counter()
    xgb = _xgboost_model(args, split)
    xgb.fit(split.X_train, split.y_train)
    xgb_seconds = time.perf_counter() - t0
    xgb_auc = float(auc(split.y_test, _predict_xgb(xgb, split.X_test, split.task)))
    core = train(params, split.X_train, split.y_train).trees
    identical = all(compare_trees(run.trees, core) for run in runs)

    rows: list[tuple[str, Any]] = [
        ("dataset", args.dataset),
        ("train rows / test rows", f"{n_rows} / {split.y_test.size}"),
        (
            "guest / host features",
            f"{split.guest_train.shape[1]} / " + " + ".join(str(b.size) for b in blocks),
        ),
        ("trees / depth / bins / lr", f"{args.trees} / {args.depth} / {args.bins} / {args.lr}"),
        ("key bits / workers per party / cores", f"{args.key_bits} / {workers} / {cores}"),
        ("load average (1 min) before the run", load_before),
    ]
    for run in runs:
        rows += _rows(run)
    by = {(run.kernel, run.scheme): run for run in runs}
    for kernel in kernels:
        if len(schemes) == 2:
            ou, paillier = by[kernel, "ou"], by[kernel, "paillier"]
            rows.append(
                (
                    "ou s/tree / paillier s/tree" + (f" ({kernel})" if kernel else ""),
                    ou.s_per_tree / paillier.s_per_tree,
                )
            )
    if args.compare_kernels:
        for scheme in schemes:
            native, gmpy2 = by["native", scheme], by["gmpy2", scheme]
            rows.append(
                (f"{scheme}: native s/tree / gmpy2 s/tree", native.s_per_tree / gmpy2.s_per_tree)
            )
    rows += [
        ("identical trees (every run = plaintext core)", identical),
        ("test AUC (xgboost hist, joined)", xgb_auc),
        ("xgboost s/tree (1 thread)", xgb_seconds / args.trees),
    ]
    print_table(
        rows,
        f"hetero SecureBoost, {args.dataset}, guest + {args.hosts} host(s) "
        "(separate processes, WebSocket + mTLS)",
    )
    out: dict[str, Any] = {
        "benchmark": "hetero",
        "dataset": args.dataset,
        "rows": n_rows,
        "key_bits": args.key_bits,
    }
    if args.compare_kernels:
        out["kernels"] = {
            str(kernel): {run.scheme: run.json() for run in runs if run.kernel == kernel}
            for kernel in kernels
        }
        out["native_over_gmpy2"] = {
            scheme: round(by["native", scheme].s_per_tree / by["gmpy2", scheme].s_per_tree, 4)
            for scheme in schemes
        }
        out["xgboost_auc"] = round(xgb_auc, 6)
        out["identical_trees"] = identical
    elif args.compare_schemes:
        for run in runs:
            out[run.scheme] = run.json()
        out["ou_over_paillier"] = round(runs[1].s_per_tree / runs[0].s_per_tree, 4)
        out["xgboost_auc"] = round(xgb_auc, 6)
        out["identical_trees"] = identical
    else:  # the line's keys as they were before there were schemes to compare
        (run,) = runs
        out |= run.json()
        out["phases"] = run.phases
        out["auc"] = round(run.auc, 6)
        out["xgboost_auc"] = round(xgb_auc, 6)
    # Per scheme, from the first kernel's run (native, with --compare-kernels).
    out["scaling"] = {scheme: by[kernels[0], scheme].prediction.scaling for scheme in schemes}
    emit_json(out)
    return 0
