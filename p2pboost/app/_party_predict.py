"""Prediction and serving, the tasks of a trained party: ``predict`` (the guest scores a
file of rows, each host answers one session; a horizontal client scores locally) and
``serve`` (the guest's endpoint for external clients; each host answers for as long as it
runs).

Apart from :mod:`p2pboost.app.party`, which runs PSI and training and dispatches every task,
because using a model is a concept of its own: these runners load a model file rather than
write one, and need the serving stack (predictor, feature store, endpoint, probes), which
training never does. :data:`TASKS` and :data:`LOCAL_TASKS` are the runners by role and task,
merged into :mod:`p2pboost.app.party`'s own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from p2pboost.app._party_run import SERVE_PREFIX, Run
from p2pboost.app._probe import NodeCollector, host_routes, probing
from p2pboost.app._progress import PartyResult
from p2pboost.app._tables import Table, check_id_column, write_scores
from p2pboost.app._waits import first_session, hosts_up
from p2pboost.app.config import Role, Task
from p2pboost.app.explain import check_explanations, record_tokens, write_explanations
from p2pboost.exceptions import ConfigError
from p2pboost.metrics import EndpointMetrics, endpoint_metrics
from p2pboost.net.node import Node

if TYPE_CHECKING:
    from p2pboost.hetero.inference.feature_store import ArrayStore, FeatureStore
    from p2pboost.hetero.inference.predictor import GuestPredictor
    from p2pboost.hetero.model import GuestModel

__all__ = ["LOCAL_TASKS", "PREPARE", "TASKS", "feature_store"]

F64 = npt.NDArray[np.float64]
#: A task's runner on the party's node.
Runner: TypeAlias = Callable[[Run, Node], Awaitable[PartyResult]]


def _guest_predictor(
    run: Run, node: Node, guest_store: FeatureStore | None = None, model: Any = None
) -> GuestPredictor:
    """The serving layer's predictor for this guest's model (``model``, or the model file),
    tuned by ``[serve]``."""
    from p2pboost.hetero.inference.predictor import GuestPredictor
    from p2pboost.hetero.model import GuestModel

    serve = run.config.serve
    return GuestPredictor(
        node,
        model if model is not None else GuestModel.load(run.config.model_path),
        guest_store=guest_store,
        max_batch=serve.max_batch,
        max_wait=serve.max_wait_ms / 1000.0,
        host_timeout=serve.host_timeout,
        session_prefix=SERVE_PREFIX,
        executor=run.executor,
        private=bool(run.config.private_inference),
    )


async def _read_scoring(run: Run, model_features: Sequence[str] | None) -> Table:
    """The rows to score, read by the model's feature names; a file that cannot be read or
    lacks a column fails naming the setting that points to it."""
    predict = run.config.predict
    try:
        return await run.read(require_label=False, path=predict.path, model_features=model_features)
    except ConfigError as exc:
        setting = "[predict] path" if predict.path is not None else "[data] path"
        raise ConfigError(f"{exc} (the scoring file: {setting} in {run.config.source})") from exc


async def _prepare_guest_predict(run: Run) -> Runner:
    """Everything the guest's ``predict`` can check alone, before its node starts: the model
    file, the scoring file and the explanations' settings. A mistake there fails at once,
    instead of after the node started and dialled the hosts (whose ``predict`` would then
    wait for a guest that already failed)."""
    from p2pboost.hetero.model import GuestModel

    model = GuestModel.load(run.config.model_path)
    table = await _read_scoring(run, model.feature_names)
    explanations = check_explanations(run.config)

    async def task(run: Run, node: Node) -> PartyResult:
        return await _predict_guest(run, node, model, table, explanations)

    return task


async def _predict_guest(
    run: Run, node: Node, model: GuestModel, table: Table, explanations: Path | None
) -> PartyResult:
    align = run.config.predict.align
    run.reporter.info(f"scoring {table.ids.size} rows (align by {align})...")
    await hosts_up(node, run.hosts, run.config.node.reconnect_timeout)
    t0 = time.perf_counter()
    async with _guest_predictor(run, node, model=model) as predictor:
        scores = np.asarray(
            await predictor.predict_batch(table.ids, table.X, align=align), dtype=np.float64
        )
        if explanations is not None:
            contributions = await predictor.explain_batch(table.ids, table.X)
    seconds = time.perf_counter() - t0
    result = _scored(run, table, scores, seconds)
    if explanations is None:
        return result
    id_column = run.config.data.id_column if run.config.data else "id"
    write_explanations(explanations, id_column, table.ids, contributions, run.config.predict)
    run.reporter.info(f"wrote the rows' explanations to {explanations}")
    return replace(result, outputs=(*result.outputs, str(explanations)))


async def _not_prepared(run: Run, node: Node) -> PartyResult:
    """The guest's ``predict`` without :data:`PREPARE` (a caller of :data:`TASKS` alone)."""
    return await (await _prepare_guest_predict(run))(run, node)


def _scored(run: Run, table: Table, scores: F64, seconds: float) -> PartyResult:
    """Write the scores; with labels in the CSV, also report the AUC (binary models)."""
    data = run.config.data
    write_scores(run.config.output_path, data.id_column if data else "id", table.ids, scores)
    summary: dict[str, Any] = {"rows": int(table.ids.size), "seconds": round(seconds, 6)}
    flat = scores.reshape(table.ids.size, -1)
    scored = ~np.isnan(flat).any(axis=1)
    summary["scored"] = int(scored.sum())
    if table.y is not None and flat.shape[1] == 1 and np.isin(table.y, (0.0, 1.0)).all():
        from p2pboost.gbdt.metrics import auc

        y, p = table.y[scored], flat[scored, 0]
        if 0 < y.sum() < y.size:
            summary["auc"] = round(float(auc(y, p)), 6)
    run.reporter.info(f"wrote {summary['scored']} scores to {run.config.output_path}")
    return run.result([run.config.output_path], **summary)


def feature_store(run: Run, model_features: Sequence[str] | None) -> ArrayStore:
    """This party's features by id, from ``predict.path`` (default ``data.path``): the
    model's columns by name when it has names."""
    from p2pboost.hetero.inference.feature_store import ArrayStore
    from p2pboost.tables import read_header

    data = run.config.data
    if data is None:
        raise ConfigError(f"{run.config.source}: a {run.config.role.value} needs [data]")
    path = run.config.predict.path or data.path
    label = [data.label_column] if data.label_column else []
    features = model_features or data.features or None
    check_id_column(path, read_header(path), data.id_column)
    return ArrayStore.from_csv(path, data.id_column, features=features, exclude=label)


async def _answer(
    run: Run, node: Node, sessions: int | None, on_session: Callable[[str], None] | None = None
) -> PartyResult:
    """A host answering the guest's bit queries: ``sessions`` of them, or forever."""
    from p2pboost.hetero.inference.predictor import serve_host
    from p2pboost.hetero.model import HostModel

    model = HostModel.load(run.config.model_path)
    store = await asyncio.to_thread(feature_store, run, model.feature_names)
    run.reporter.info(
        f"answering {run.peer}'s queries for {store.n_features} features"
        + ("" if sessions is None else f" ({sessions} session)")
    )
    predict = run.config.predict
    tokens = record_tokens(run.config.workdir / predict.feature_tokens, run.config.id)
    async with probing(run.config.serve.probe, host_routes(node, run.peer)):
        await serve_host(
            node,
            model,
            store,
            session_prefix=SERVE_PREFIX,
            sessions=sessions,
            executor=run.executor,
            on_session=on_session,
            private=run.config.private_inference,
            explain_features=predict.explain_features,
            on_tokens=tokens if predict.explain_features else None,
        )
    return run.result()


async def _predict_host(run: Run, node: Node) -> PartyResult:
    """One prediction session for the guest, which must open it within
    ``node.reconnect_timeout`` (the one setting both sides of ``predict`` wait by): a guest
    that never comes, or whose ``predict`` failed before it asked, ends this run with an
    error saying so instead of a wait without end."""
    wait = run.config.node.reconnect_timeout
    return await first_session(lambda on: _answer(run, node, 1, on), run.peer, wait)


async def _serve_host(run: Run, node: Node) -> PartyResult:
    return await _answer(run, node, None)


async def _predict_client(run: Run) -> PartyResult:
    """Homo models are whole at every client: prediction is local, no node is started."""
    from p2pboost.gbdt.booster import Booster

    model = Booster.load(run.config.model_path)
    table = await _read_scoring(run, model.feature_names)
    t0 = time.perf_counter()
    scores = model.predict(table.X)
    return _scored(run, table, np.asarray(scores, dtype=np.float64), time.perf_counter() - t0)


async def _serve_guest(run: Run, node: Node) -> PartyResult:
    """The endpoint for external clients, with mutual TLS from this party's certificates
    (clients need a certificate from the federation's CA; the hosts' are refused). Requests
    may carry only an id: the guest's own features are then looked up in its CSV."""
    from p2pboost.certs import TLSConfig
    from p2pboost.hetero.inference.endpoint import probe_routes, serve_endpoint
    from p2pboost.hetero.model import GuestModel

    listen = run.config.serve.listen
    model = GuestModel.load(run.config.model_path)
    store = await asyncio.to_thread(feature_store, run, model.feature_names)
    run.reporter.info(f"{len(store)} ids of ours loaded; starting the endpoint on {listen}")
    await hosts_up(node, run.hosts, run.config.node.reconnect_timeout)
    metrics = endpoint_metrics()
    if isinstance(metrics, EndpointMetrics):
        metrics.add_collector(NodeCollector(node))
    async with _guest_predictor(run, node, store, model) as predictor:
        tls = TLSConfig.from_dir(run.config.certs)
        async with probing(run.config.serve.probe, probe_routes(predictor, metrics)):
            await serve_endpoint(predictor, listen, tls=tls, metrics=metrics)
    return run.result()


#: Tasks that check their local inputs before the node starts: the runner to use instead
#: of :data:`TASKS`' own, with what it read (:func:`p2pboost.app.party.run_party` calls these
#: first).
PREPARE: dict[tuple[Role, Task], Callable[[Run], Awaitable[Runner]]] = {
    (Role.GUEST, Task.PREDICT): _prepare_guest_predict,
}
#: The runners of the tasks on a node, by role and task (merged into the party's own).
TASKS: dict[tuple[Role, Task], Runner] = {
    (Role.GUEST, Task.PREDICT): _not_prepared,
    (Role.HOST, Task.PREDICT): _predict_host,
    (Role.GUEST, Task.SERVE): _serve_guest,
    (Role.HOST, Task.SERVE): _serve_host,
}
#: The runners of the tasks without a node.
LOCAL_TASKS: dict[tuple[Role, Task], Callable[[Run], Awaitable[PartyResult]]] = {
    (Role.CLIENT, Task.PREDICT): _predict_client,
}
