"""One party of a federation, run from its config file (``p2pboost party``).

Each organisation runs this on its own machine with its own
:class:`~p2pboost.app.config.PartyConfig`: the node (mutual TLS with the certificate in
``certs``), its CSV, and one task:

* ``psi``: private set intersection of the ids; every party writes the common ids to
  ``workdir/intersection.csv`` (each learns the intersection and the others' set sizes).
* ``train``: hetero (guest + hosts, rows aligned by PSI first unless ``train.psi = false``;
  resumed from checkpoints when a peer restarts) or homo (server + clients); each party
  writes its own model file (only its own secrets).
* ``predict``: the guest scores every row of its CSV in one round trip per host and writes
  ``id,score``; hosts answer from a feature store loaded from their CSV. Homo clients predict
  locally.
* ``serve``: the guest's long-running endpoint for external clients; hosts answer forever.

Training runs PSI here rather than through the estimators' ``ids=``: the aligned rows must be
known before ``afit`` so the training rows can be an evaluation set (the metric in the bar),
and so can the validation rows of ``[data] valid_path``, aligned by a PSI of their own
(:mod:`p2pboost.app._validation`).
The session names are the estimators', so a party run from here and one embedded with the
facade still find each other.

Progress goes to a :class:`Reporter` (the CLI draws bars; the default logs), never to stdout.

This module runs PSI and training and dispatches every task; prediction and serving, which
use a trained model rather than make one, are in :mod:`p2pboost.app._party_predict`, and the
run's context that every task runner is given (:class:`~p2pboost.app._party_run.Run`) in
:mod:`p2pboost.app._party_run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.app import _party_predict as predicting
from p2pboost.app._contribution import measure
from p2pboost.app._party_predict import feature_store
from p2pboost.app._party_run import HETERO_SESSION, HOMO_SESSION, Run
from p2pboost.app._plan import agree
from p2pboost.app._progress import (
    LogReporter,
    Meter,
    PartyResult,
    Reporter,
    TreeClock,
    host_progress,
)
from p2pboost.app._recovery import explain, resume_hint, resume_on_restart
from p2pboost.app._tables import Table, load_table, write_csv
from p2pboost.app._validation import VALID, eval_sets, valid_rows
from p2pboost.app.config import PartyConfig, Role, Task
from p2pboost.exceptions import ConfigError, PeerDisconnected, SessionClosed
from p2pboost.gbdt.binning import is_sparse
from p2pboost.gbdt.callbacks import CallbackEnv
from p2pboost.net.node import Node
from p2pboost.workers import ClusterPool, connect_cluster

__all__ = [
    "LogReporter",
    "PartyResult",
    "Reporter",
    "Table",
    "build_node",
    "load_table",
    "run_party",
]

#: The run's context and a host's feature store, under the names they had in this module
#: before they moved (tests import them from here).
_Run = Run
_store = feature_store

logger = logging.getLogger("p2pboost.app.party")

INTERSECTION_FILE = "intersection.csv"


def build_node(config: PartyConfig) -> Node:
    """The party's node: mutual TLS from ``certs``, whose certificate must name this party."""
    from p2pboost.certs import TLSConfig

    tls = TLSConfig.from_dir(config.certs)
    if tls.party_id != config.id:
        raise ConfigError(
            f"{config.source}: id is {config.id!r} but the certificate {tls.cert_file} is for "
            f"party {tls.party_id!r}"
        )
    return Node(
        config.id,
        listen=config.listen,
        peers=dict(config.peers),
        tls=tls,
        config=config.node.node_config(),
    )


async def run_party(config: PartyConfig, reporter: Reporter | None = None) -> PartyResult:
    """Run ``config.task`` as ``config.role``; errors are p2pboost exceptions naming the cause.

    A peer that never answers (wrong address, not started) fails after
    ``node.reconnect_timeout`` with :class:`PeerDisconnected` naming it and its address. PSI
    and training first agree with the peers on the settings they must share
    (:mod:`p2pboost.app._plan`): a difference fails at once on every side, naming it.
    """
    key = (config.role, config.task)
    if key not in _TASKS and key not in _LOCAL_TASKS:
        can = [t.value for r, t in (*_TASKS, *_LOCAL_TASKS) if r is config.role]
        raise ConfigError(
            f"{config.source}: a {config.role.value} has no {config.task.value!r} task "
            f"(it can: {', '.join(can)})"
        )
    run = Run(config, reporter or LogReporter())
    if key in _LOCAL_TASKS:
        return await _LOCAL_TASKS[key](run)
    prepare = predicting.PREPARE.get(key)  # local inputs checked before any network
    task = await prepare(run) if prepare is not None else _TASKS[key]
    node = build_node(config)
    config.workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()  # checkpoints written after this are this run's
    async with _compute(run) as executor:
        run = replace(run, executor=executor)
        try:
            async with node:
                if node.address is not None:  # port 0 resolved: where the peers must dial
                    run.reporter.info(f"listening on {node.address}")
                return await resume_on_restart(
                    config, lambda c: task(replace(run, config=c), node), run.reporter.info
                )
        except PeerDisconnected as exc:
            raise explain(exc, config, started) from exc
        except SessionClosed as exc:
            # A peer ended the session (it stopped, or failed on its side).
            hint = resume_hint(config, started)
            if not hint:
                raise
            raise SessionClosed(f"{exc}{hint}") from exc


@contextlib.asynccontextmanager
async def _compute(run: Run) -> AsyncIterator[ClusterPool | None]:
    """The party's Dask cluster when ``[compute]`` names one (connected in a thread, so the
    loop stays free), else None: the protocols then start their own process pools."""
    compute = run.config.compute
    if compute.scheduler is None or compute.tls is None:
        yield None
        return
    run.reporter.info(f"compute: connecting to the cluster at {compute.scheduler}...")
    pool = await asyncio.to_thread(
        connect_cluster,
        compute.scheduler,
        compute.tls,
        timeout=compute.connect_timeout,
        key_workers=compute.key_workers or None,
    )
    run.reporter.info(f"compute: {pool.workers} workers")
    try:
        yield pool
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


# -- psi --------------------------------------------------------------------------------------


async def _align(
    run: Run, node: Node, ids: npt.NDArray[Any], of: str = ""
) -> npt.NDArray[np.int64]:
    """PSI with the peers; positions of this party's common rows, in the guest's order.
    ``of``: another file's ids (``"valid"``: the validation rows), in a session of its own
    once the parties have agreed."""
    from p2pboost.protocols.psi import psi_guest, psi_host

    guest = run.config.role is Role.GUEST
    peers = run.hosts if guest else [run.peer]
    if not of:
        # Agreeing on the settings is the first exchange: until it returns, this party is only
        # waiting for its peers (not started yet, or still connecting), not matching anything.
        run.reporter.info(f"PSI: waiting for {_peer_names(run, peers)} to answer...")
        await agree(node, run.config, peers, run.plans)
    what = f"PSI{f' ({of})' if of else ''}"
    run.reporter.info(f"{what}: matching {ids.size} ids with {', '.join(peers)}...")
    t0 = time.perf_counter()
    blinded = Meter(run.reporter, what, "ids blinded").update
    name = f"{HETERO_SESSION}-psi{f'-{of}' if of else ''}"
    async with node.session(name, peers=peers) as session:
        if guest:
            result = await psi_guest(session, peers, ids, executor=run.executor, progress=blinded)
        else:
            result = await psi_host(session, peers[0], ids, executor=run.executor, progress=blinded)
    sizes = ", ".join(f"{p} {n}" for p, n in result.peer_sizes.items())
    run.reporter.info(
        f"{what}: {result.positions.size} common ids of {ids.size} (peers: {sizes}) in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    if result.positions.size == 0:
        raise ConfigError("the parties have no sample id in common: nothing to do")
    return result.positions


def _peer_names(run: Run, peers: Sequence[str]) -> str:
    """``host at wss://...`` for a peer this party dials; a peer that dials here by name."""
    addresses = run.config.peers
    return ", ".join(
        f"{p} at {addresses[p]}" if addresses.get(p) else f"{p} (it connects here)" for p in peers
    )


def _write_intersection(run: Run, ids: npt.NDArray[Any]) -> Path:
    data = run.config.data
    path = run.config.workdir / INTERSECTION_FILE
    write_csv(path, [data.id_column if data else "id"], [[i] for i in ids.tolist()])
    return path


async def _psi(run: Run, node: Node) -> PartyResult:
    table = await run.read(require_label=False)
    keep = await _align(run, node, table.ids)
    path = _write_intersection(run, table.ids[keep])
    return run.result([path], rows=int(table.ids.size), common=int(keep.size))


# -- hetero training --------------------------------------------------------------------------


def _tree_callback(run: Run) -> Any:
    """Advance the bar after every tree, with the training metric when it is evaluated and
    the tree's own time (the run's total beside it)."""
    clock = TreeClock()

    def on_tree(env: CallbackEnv) -> None:
        done, total = env.iteration + 1, env.n_estimators
        label = f"tree {done}/{total}"
        for name, scores in env.evaluation.items():  # the training rows, the validation rows
            label += "".join(f" {name} {m} {v:.4f}" for m, v in scores.items())
        lap = clock.lap(done, total)
        record = {"progress": "training", "done": done, "total": total, "unit": "trees"}
        run.reporter.step(f"{label} {lap}", record | {"evaluation": env.evaluation})

    return on_tree


async def _aligned(run: Run, node: Node, table: Table) -> tuple[Table, list[Path]]:
    """The training rows (PSI first, unless ``train.psi = false``), after the parties agreed
    on their settings (in :func:`_align` when PSI runs)."""
    if not run.config.train.psi:
        await agree(node, run.config, list(run.config.peers), run.plans)
        return table, []
    keep = await _align(run, node, table.ids)
    y = None if table.y is None else table.y[keep]
    aligned = Table(table.ids[keep], table.X[keep], y, table.features)
    return aligned, [_write_intersection(run, aligned.ids)]


async def _valid(run: Run, node: Node, table: Table) -> Table | None:
    """The validation rows (``[data] valid_path``), aligned like the training rows."""
    return await valid_rows(run.config, table, run.read, lambda i: _align(run, node, i, VALID))


async def _train_guest(run: Run, node: Node) -> PartyResult:
    from p2pboost.hetero.config import HeteroConfig
    from p2pboost.hetero.estimators import HeteroGuest

    table, outputs = await _aligned(run, node, await run.read(require_label=True))
    assert table.y is not None  # require_label
    train = run.config.train
    sets = eval_sets(table, await _valid(run, node, table), train.eval_train)
    hetero = HeteroConfig(
        key_bits=train.key_bits,
        allow_insecure_key=train.insecure_key_bits,
        scheme=train.scheme,
        complete_secure=train.complete_secure,
        tree_num_per_party=train.tree_num_per_party,
        host_depth=train.host_depth,
        guest_depth=train.guest_depth,
        purity_bound=train.purity_bound,
        label_dp_epsilon=train.label_dp_epsilon or None,
    )
    guest = HeteroGuest(
        train.params,
        config=hetero,
        session_id=HETERO_SESSION,
        checkpoint_dir=run.config.checkpoint_path,
        executor=run.executor,
        eval_metric=train.eval_metric,
        early_stopping_rounds=train.early_stopping_rounds,
    )
    n = train.params.n_estimators
    verb = "resuming" if train.resume else "training"
    run.reporter.begin(f"{verb} {n} trees with {', '.join(run.hosts)}", n)
    t0 = time.perf_counter()
    await guest.afit(
        node,
        run.hosts,
        table.X,
        table.y,
        eval_set=sets.guest,
        eval_names=sets.names or None,
        callbacks=[_tree_callback(run)],
        resume=train.resume,
        feature_names=list(table.features),
        init_model=run.config.init_model_path,
    )
    seconds = time.perf_counter() - t0
    trees = len(guest.model_.trees)
    run.reporter.end(f"trained {trees} trees in {seconds:.1f} s")
    model = guest.model_
    contribution = await measure(model, train, table.X, table.y, sets, run.reporter.info)
    guest.save(run.config.model_path)
    return run.result(
        [*outputs, run.config.model_path],
        rows=int(table.ids.size),
        trees=trees,
        s_per_tree=round(seconds / max(trees, 1), 6),
        **_filtered(model.filtered_rows),
        **contribution,
    )


async def _train_host(run: Run, node: Node) -> PartyResult:
    from p2pboost.hetero.estimators import HeteroHost

    data = run.config.data
    sparse = data.sparse if data is not None else False
    read = await run.read(require_label=False, sparse=sparse)
    if is_sparse(read.X):  # kept sparse (data.sparse): say so, with its density
        density = read.X.nnz / max(1, read.X.shape[0] * read.X.shape[1])
        run.reporter.info(
            f"features: {read.X.shape[1]} columns, {density:.1%} of cells non-zero, kept sparse"
        )
    table, outputs = await _aligned(run, node, read)
    trees = run.plans[run.peer].trees if run.peer in run.plans else 0
    of = f" ({trees} trees)" if trees else ""
    run.reporter.info(f"training with {run.peer} on {table.ids.size} rows{of}...")
    t0 = time.perf_counter()
    valid = await _valid(run, node, table)
    eval_set = eval_sets(table, valid, run.config.train.eval_train).host
    host = await HeteroHost(
        session_id=HETERO_SESSION,
        checkpoint_dir=run.config.checkpoint_path,
        memory_budget_mb=run.config.train.memory_budget_mb,
        executor=run.executor,
        monotone_constraints=run.config.train.params.monotone_constraints,
        interaction_constraints=run.config.train.params.interaction_constraints,
    ).afit(
        node,
        run.peer,
        table.X,
        eval_set=eval_set,
        resume=run.config.train.resume,
        feature_names=list(table.features),
        init_model=run.config.init_model_path,
        progress=host_progress(Meter(run.reporter, "training", "trees", every=0.0), trees),
    )
    seconds = time.perf_counter() - t0
    run.reporter.info(f"trained in {seconds:.1f} s ({len(host.model_.splits)} splits are ours)")
    host.save(run.config.model_path)
    return run.result([*outputs, run.config.model_path], rows=int(table.ids.size))


# -- homo training ----------------------------------------------------------------------------


async def _train_server(run: Run, node: Node) -> PartyResult:
    from p2pboost.homo.estimators import HomoServer

    clients = list(run.config.peers)
    n = run.config.train.params.n_estimators
    run.reporter.info(f"coordinating {n} trees with {', '.join(clients)}...")
    await agree(node, run.config, clients)
    t0 = time.perf_counter()
    train = run.config.train
    server = await HomoServer(
        train.params,
        session=HOMO_SESSION,
        checkpoint_dir=run.config.checkpoint_path,
        share_statistics=train.share_statistics,
        eval_metric=train.eval_metric,
        early_stopping_rounds=train.early_stopping_rounds,
        allow_two_clients=train.allow_two_clients,
    ).afit(
        node,
        clients,
        init_model=run.config.init_model_path,
        resume=run.config.train.resume,
        before_rejoin=lambda client: agree(node, run.config, [client]),
    )
    seconds = time.perf_counter() - t0
    server.model_.save(run.config.model_path)
    run.reporter.info(f"trained {n} trees in {seconds:.1f} s")
    dropped = server.result_.dropped
    for client, why in dropped.items():
        logger.warning("client %s was dropped from the run: %s", client, why)
    return run.result(
        [run.config.model_path],
        trees=n,
        s_per_tree=round(seconds / n, 6),
        clients=server.result_.clients,
        dropped=dropped,
    )


async def _train_client(run: Run, node: Node) -> PartyResult:
    from p2pboost.homo.estimators import HomoClient

    table, train = await run.read(require_label=True), run.config.train
    valid_path = run.config.data.valid_path if run.config.data is not None else None
    valid = None  # this client's validation rows, read by the training columns' names
    if valid_path is not None:
        rows = await run.read(require_label=True, path=valid_path, model_features=table.features)
        valid = (rows.X, rows.y)
    run.reporter.info(f"training with {run.peer} on {table.ids.size} local rows...")
    await agree(node, run.config, [run.peer])
    client = HomoClient(
        train.params,
        identity=run.config.certs,
        session=HOMO_SESSION,
        eval_metric=train.eval_metric,
        early_stopping_rounds=train.early_stopping_rounds,
        allow_two_clients=train.allow_two_clients,
    )
    await client.afit(node, run.peer, table.X, table.y, eval_set=valid)
    client.model_.save(run.config.model_path)
    run.reporter.info("trained; the model is local: predict needs no network")
    return run.result(
        [run.config.model_path],
        rows=int(table.ids.size),
        **_filtered(client.model_.filtered_rows),
    )


def _filtered(count: int | None) -> dict[str, int]:
    """A private run's count of the row-trees this party's gradient filter left out, for its
    own result only: a noiseless statistic of its rows, which the model file does not hold."""
    return {} if count is None else {"filtered_rows": count}


_TASKS: dict[tuple[Role, Task], Callable[[Run, Node], Awaitable[PartyResult]]] = {
    (Role.GUEST, Task.PSI): _psi,
    (Role.HOST, Task.PSI): _psi,
    (Role.GUEST, Task.TRAIN): _train_guest,
    (Role.HOST, Task.TRAIN): _train_host,
    (Role.SERVER, Task.TRAIN): _train_server,
    (Role.CLIENT, Task.TRAIN): _train_client,
    **predicting.TASKS,
}
_LOCAL_TASKS: dict[tuple[Role, Task], Callable[[Run], Awaitable[PartyResult]]] = {
    **predicting.LOCAL_TASKS,
}


def run(config: PartyConfig, reporter: Reporter | None = None) -> PartyResult:
    """Blocking :func:`run_party` (its own event loop)."""
    return asyncio.run(run_party(config, reporter))
