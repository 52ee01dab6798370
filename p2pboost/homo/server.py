"""The server's side of horizontal SecureBoost: it holds no data and drives the clients.

:func:`server_train` runs the stages in order; every number it uses is a securely aggregated
sum (:meth:`~p2pboost.homo._federation.Federation.aggregate`; layouts in
:mod:`p2pboost.homo._vectors`)::

    hello      the clients agree on the settings (a digest) and announce their features
    stats      rows and label statistics: the base margin
    bins       counts per key range until the union's bin edges are known (``_binning``)
    median     objectives that start from the labels' median: counts per key range until
               the labels' middle values are known (``_quantile``)
    model      the edges and base margin, to every client
    per tree   grid (the union's fixed-point grid), root (the root's histogram), then per
               layer children (the smaller child of each split); for L1, median rounds
               until every leaf's middle residuals are known; ``tree`` to every client
    per round  eval (summed validation losses), when validating
    done       the best round, to every client

Trees grow through the core's schedule (:meth:`~p2pboost.gbdt.grower.HistogramGrower.schedule`)
and rounds run through its round loop (:class:`~p2pboost.gbdt.rounds.RoundLoop`): the server
only answers the schedule's steps with aggregated histograms, so on the same edges the model
equals the core's on the union of the rows. Medians (L1's leaves, the labels' median) are the
core's functions applied to the middle values a search over summed counts finds. When a client
drops, the federation raises :class:`~p2pboost.homo._federation.Restart` and the current stage
(statistics and binning, one tree, or one evaluation) starts again with the survivors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ProtocolError, RemoteProtocolError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.booster import Booster, check_warm_start, node_columns
from p2pboost.gbdt.callbacks import EarlyStopping
from p2pboost.gbdt.constraints import FeatureConstraints, resolve_constraints
from p2pboost.gbdt.grower import (
    ChooseSplits,
    GrowStep,
    HistogramGrower,
    NodeColumns,
    Partition,
    drive_async,
)
from p2pboost.gbdt.objectives import Objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import PrivateTree, tree_plan
from p2pboost.gbdt.rounds import RoundLoop, RoundStart, refit_leaves
from p2pboost.gbdt.split import candidate_mask
from p2pboost.gbdt.tree import Tree
from p2pboost.homo._binning import EdgeSearch
from p2pboost.homo._federation import Federation, Rejoin, Restart
from p2pboost.homo._messages import (
    CollectBins,
    CollectChildren,
    CollectEval,
    CollectGrid,
    CollectMedian,
    CollectRoot,
    CollectStats,
    Done,
    FinishedTree,
    Hello,
    Joined,
    ModelHeader,
)
from p2pboost.homo._quantile import MedianSearch, middle_rows
from p2pboost.homo._sampling import round_seed
from p2pboost.homo._vectors import (
    GRID_LENGTH,
    HistLayout,
    Stats,
    eval_length,
    read_eval,
    read_grid,
    read_stats,
    stats_length,
)
from p2pboost.homo.checkpoint import ServerCheckpoint
from p2pboost.homo.config import (
    VERSION,
    HomoConfig,
    HomoPhase,
    HomoResult,
    Tap,
    warn_two_clients,
)
from p2pboost.net.node import Session

__all__ = ["server_train"]

logger = logging.getLogger("p2pboost.homo.server")


async def server_train(
    sessions: Mapping[str, Session],
    config: HomoConfig,
    *,
    n_features: int | None = None,
    run_id: str | None = None,
    tap: Tap | None = None,
    init_model: Booster | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: bool = False,
    rejoin: Rejoin | None = None,
) -> HomoResult:
    """Coordinate training among the clients of ``sessions`` (one session per client).

    ``init_model`` (warm start) continues that model with ``params.n_estimators`` more rounds,
    as the core's ``train(init_model=...)``: its bins, base margin, trees, history and random
    generator carry on (no statistics or binning round), and every client receives its trees
    and adds them to its margins, in order, before the first new tree.

    ``checkpoint``: a directory where the server writes its state after every round;
    ``resume``: continue from it (if it holds one) to the model an uninterrupted run grows
    (:mod:`p2pboost.homo.checkpoint`). ``rejoin(client)``: the new session of a client whose
    process restarted; with it such a client is taken back instead of dropped, and the tree
    it interrupted is grown again with it.

    ``n_features``, if given, is checked against every client's. ``run_id`` (default:
    random) names this run in every signature and key derivation, so nothing from another
    run can be replayed. ``tap`` (for audits and tests) is called with ``("recv", client,
    message)`` for every message received (the map as it arrived) and ``("aggregate", tag,
    {...})`` for every aggregate: everything the server ever learns.
    """
    config = config.validate()
    if config.params.dp is not None and (init_model is not None or resume):
        raise InputError(
            "differential privacy cannot continue a model (init_model, resume): its budget "
            "and row assignment were spent by the run that made it"
        )
    if len(sessions) < config.min_clients:
        raise InputError(f"need at least {config.min_clients} clients, got {len(sessions)}")
    warn_two_clients(config, len(sessions), logger)
    if resume and checkpoint is None:
        raise InputError("resume needs the checkpoint directory to resume from")
    saved = ServerCheckpoint.load(checkpoint) if resume and checkpoint is not None else None
    if saved is not None:
        saved.check(config, list(sessions))
        total = saved.warm_rounds + config.params.n_estimators
        logger.info("resuming at round %d of %d", saved.model.n_rounds, total)
    elif resume:
        logger.info("no checkpoint to resume from: starting afresh")
    loop = asyncio.get_running_loop()
    start = loop.time()
    fed = Federation(sessions, config, tap, run_id or secrets.token_hex(16), rejoin)
    params = config.params
    objective = get_objective(params)
    k_out = objective.n_outputs

    hello = Hello(VERSION, config.digest(), fed.run_id, config.shared())
    for c, rep in (await fed.ask_same(list(fed.active), hello, Joined)).items():
        f = rep.n_features
        if n_features is not None and f != n_features:
            raise RemoteProtocolError(f"has {f!r} features, expected {n_features}", peer=c)
        n_features = f
    if n_features is None:
        raise ProtocolError("no client answered hello")
    # Constraints by position (a horizontal federation shares no feature names), checked
    # against the clients' columns before any work.
    constraints = resolve_constraints(
        params.monotone_constraints, params.interaction_constraints, n_features
    )

    # Where the rounds start: afresh, a warm start (init_model) or a resumed run (saved).
    begin = saved.model if saved is not None else init_model
    warm_rounds = saved.warm_rounds if saved is not None else 0
    if begin is None:
        mapper, base = await _bins_and_base(fed, hello, params, objective, n_features)
    else:  # the model's bins and base margin carry on
        check_warm_start(begin.params, params, begin.n_features, n_features)
        mapper, base = begin.mapper, [float(v) for v in begin.base_margin]
    await fed.broadcast(ModelHeader(edges=mapper.edges, base=base))
    warm = None
    if begin is not None:
        per_round = begin.trees_per_round
        for t, (tree, out) in enumerate(zip(begin.trees, begin.tree_output, strict=True)):
            await fed.broadcast(FinishedTree(t // per_round, out, config.shared_tree(tree)))
        if saved is None:
            assert init_model is not None
            warm_rounds = init_model.n_rounds
        warm = RoundStart(
            begin.trees,
            begin.tree_output,
            begin.history,
            begin.rng_state,
            extend=saved is None,
            base_rounds=warm_rounds,
        )
    setup_done = loop.time()

    # -- trees --------------------------------------------------------------------------------
    stopper = (
        [EarlyStopping(config.early_stopping_rounds)]
        if config.early_stopping_rounds is not None
        else []
    )
    # The core's round loop: the same column draws, trees per round and early stop.
    rounds = RoundLoop(params, n_features, k_out, stopper, start=warm)
    evaluation: list[float] = []
    if saved is not None:
        rounds.replay_callbacks()  # early stopping's best round and patience, as they were
        evaluation = list(saved.model.history.get("valid", {}).get(config.metric, []))
        evaluation = evaluation[warm_rounds:]
    private = rounds.privacy  # a private model: the mechanisms run here, on the sums
    all_candidates = candidate_mask(mapper.n_bins, params.max_bin)

    def model_so_far() -> Booster:
        return Booster(
            params,
            mapper,
            np.asarray(base),
            rounds.trees,
            rounds.tree_output,
            rounds.trees_per_round,
            rounds.best_iteration,
            rounds.history,  # the aggregated metric per round: report draws the learning curve
            rounds.rng_state,  # a warm start continues the draws
            privacy=None if private is None else private.record(),
            # no filtered_rows: each client filters its own rows, and counts them itself
        )

    for it in rounds:
        fed.phase = HomoPhase.TREES
        sample_seed = round_seed(params, it)  # clients sample rows: subsample, GOSS (_sampling)
        columns = rounds.sample_columns()
        candidates = all_candidates & columns[:, None, None]
        for out in rounds.outputs:
            while True:
                await fed.readmit(hello, n_features)  # restarted clients, back for this tree
                mechanisms = None
                if private is not None:
                    mechanisms = private.tree(tree_plan(params, len(rounds.trees)))
                try:
                    tree = await _grow(
                        fed,
                        params,
                        mapper,
                        candidates,
                        (it, out, sample_seed),
                        k_out,
                        mechanisms,
                        node_columns(params, rounds.rng, columns),
                        constraints,
                    )
                    if objective.median_refit:
                        tree = await _refit(fed, objective, tree, params.learning_rate)
                    break
                except Restart:
                    if private is not None and mechanisms is not None:
                        private.aborted(mechanisms)  # its choices reached the clients
                    continue  # a client dropped: grow this tree again with the survivors
            if private is not None and mechanisms is not None:
                private.released(mechanisms)
            rounds.add_tree(tree, out)
            await fed.broadcast(FinishedTree(it, out, config.shared_tree(tree)))
        if config.evaluating:
            fed.phase = HomoPhase.EVAL
            score = await _evaluate(fed, config, hello, n_features)
            if score is not None:
                evaluation.append(score)
                rounds.end_round({"valid": {config.metric: score}})
        if checkpoint is not None:
            ckpt = ServerCheckpoint(model_so_far(), warm_rounds, config.shared(), list(sessions))
            await asyncio.to_thread(ckpt.save, checkpoint)
    booster = model_so_far()
    fed.phase = HomoPhase.DONE
    record = "" if booster.privacy is None else json.dumps(booster.privacy)
    await fed.broadcast(
        Done(booster.best_iteration, booster.history, json.dumps(rounds.rng_state), record)
    )
    end = loop.time()
    return HomoResult(
        booster=booster,
        clients=list(fed.active),
        rounds=fed.round,
        epochs=fed.epoch,
        seconds_setup=setup_done - start,
        seconds_trees=end - setup_done,
        n_trees=len(booster.trees),
        evaluation=evaluation,
        dropped=dict(fed.dropped),
    )


async def _bins_and_base(
    fed: Federation, hello: Hello, params: BoostParams, objective: Objective, n_features: int
) -> tuple[BinMapper, list[float]]:
    """The union's bin edges and base margin from aggregated statistics and binning sketches
    (restarted whenever a client drops, or comes back after a restart)."""
    while True:
        await fed.readmit(hello, n_features)
        try:
            fed.phase = HomoPhase.STATS
            stats = read_stats(await fed.aggregate(CollectStats, stats_length(objective.n_outputs)))
            fed.phase = HomoPhase.BINNING
            search = EdgeSearch(n_features, params.max_bin)
            while not search.done:
                q = search.query()
                ask = partial(CollectBins, level=q.level, feature=q.feature, prefix=q.prefix)
                search.feed(await fed.aggregate(ask, q.length))
            middle = None
            if objective.median_start and params.base_score is None and params.dp is None:
                middle = (await _middle(fed, "labels", [0])).get(0)
            break
        except Restart:
            continue
    if stats.n_rows < 1:
        raise ProtocolError("the clients hold no rows")
    mapper = BinMapper.from_dict(
        {"max_bin": params.max_bin, "edges": [e.tolist() for e in search.edges()]}
    )
    return mapper, _base_margin(objective, params, stats, middle)


def _base_margin(
    objective: Objective, params: BoostParams, stats: Stats, middle: npt.NDArray[np.float64] | None
) -> list[float]:
    """The core's ``init_margin`` from summed label statistics, or, for objectives that start
    from the labels' median, from the labels' middle values (``middle``), whose median it is."""
    if params.base_score is not None:
        return [float(v) for v in objective.margin_from_score(params.base_score)]
    if params.dp is not None:  # as the core: a private model does not start at the labels' mean
        return [0.0] * objective.n_outputs
    if objective.median_start:
        if middle is None:
            raise ProtocolError("the labels' median search found no labels")
        return [float(v) for v in objective.init_margin(middle)]
    k, n = objective.n_outputs, stats.n_rows
    if objective.name == "binary:logistic":
        y = np.zeros(n)
        y[: int(stats.label_counts[0])] = 1.0  # only the count of ones matters to the mean
        return [float(v) for v in objective.init_margin(y)]
    if objective.name == "multi:softmax":
        y = np.repeat(np.arange(k, dtype=np.float64), stats.label_counts[:k])
        if y.size != n:
            raise ProtocolError("class counts do not add up to the rows")
        return [float(v) for v in objective.init_margin(y)]
    if objective.name == "reg:tweedie":
        if not stats.label_sum > 0:
            raise ProtocolError("tweedie needs labels whose sum is positive")
        return [float(np.log(stats.label_sum / n))]
    return [stats.label_sum / n]


async def _grow(
    fed: Federation,
    params: BoostParams,
    mapper: BinMapper,
    candidates: npt.NDArray[np.bool_],
    tree: tuple[int, int, int],
    k_obj: int,
    privacy: PrivateTree | None = None,
    columns: NodeColumns | None = None,
    constraints: FeatureConstraints | None = None,
) -> Tree:
    """One tree by the core's schedule, its histograms securely aggregated from the clients
    (``tree``: round, output and the round's row-sample seed; ``privacy``: a private tree's
    mechanisms, applied to the aggregated sums)."""
    it, out, sample_seed = tree
    layout = HistLayout(mapper.n_features, mapper.n_slots, k_obj if out < 0 else 1)
    n_slots = mapper.n_slots
    grid_g, grid_h = read_grid(
        await fed.aggregate(
            partial(CollectGrid, it=it, output=out, sample_seed=sample_seed), GRID_LENGTH
        )
    )
    root_request = partial(
        CollectRoot,
        g_bits=grid_g.bits,
        g_mag=grid_g.magnitude_bits,
        h_bits=grid_h.bits,
        h_mag=grid_h.magnitude_bits,
        n_rows=grid_g.max_rows,
    )
    grower = HistogramGrower(
        params,
        layout.n_outputs,
        candidates,
        mapper.thresholds,
        privacy,
        columns=columns,
        constraints=constraints,
    )
    hist = layout.read(await fed.aggregate(root_request, layout.length(1)), 1, grid_g, grid_h)
    assert hist.count is not None
    root = grower.start(
        hist,
        hist.grad[:, 0].sum(axis=1),
        hist.hess[:, 0].sum(axis=1),
        hist.count.sum(axis=2)[:, 0],
    )

    async def answer(step: GrowStep) -> Any:
        if isinstance(step, ChooseSplits):
            return grower.find_splits(step.frontier)
        if isinstance(step, Partition):
            return None  # the clients move their rows when told the plan (below)
        frontier, plan = step.frontier, step.plan
        assert frontier.hist.count is not None
        cnt = frontier.hist.count[plan.parent_index, plan.feature]  # (m, B)
        b = np.arange(n_slots)[None, :]
        in_left = (b <= plan.threshold_bin[:, None]) & (b < n_slots - 1)
        in_left |= (b == n_slots - 1) & plan.default_left[:, None]
        n_left = (cnt * in_left).sum(axis=1)
        n_right = frontier.count[plan.parent_index] - n_left
        small = np.where(n_left <= n_right, plan.left, plan.right)
        request = partial(
            CollectChildren,
            nodes=_int64(plan.nodes),
            feature=_int64(plan.feature),
            threshold_bin=_int64(plan.threshold_bin),
            default_left=np.asarray(plan.default_left, dtype=np.bool_),
            left=_int64(plan.left),
            right=_int64(plan.right),
            n_nodes=int(grower.tree.n_nodes),
            build=_int64(small),
        )
        total = await fed.aggregate(request, layout.length(small.size))
        small_hist = layout.read(total, small.size, grid_g, grid_h)
        return grower.next_frontier(frontier, plan, small_hist, n_left, n_right)

    return await drive_async(grower.schedule(root), answer)


async def _middle(
    fed: Federation, of: str, groups: Iterable[int], tree: Tree | None = None
) -> dict[int, npt.NDArray[np.float64]]:
    """The values at the middle ranks of each group of the clients' ``of`` (``labels``; or
    ``residuals``, grouped by the leaves of ``tree``), from a median search over summed
    counts (:mod:`p2pboost.homo._quantile`); groups without rows are left out."""
    # The clients' last partition is the layer above the leaves (leaves get no histograms):
    # they find their rows' leaves in the tree's shape, sent without its Newton leaf values
    # (nor covers and gains: the shape is all they need).
    shape = None
    if tree is not None:
        zeros = np.zeros_like(tree.gain)
        shape = replace(tree, value=np.zeros_like(tree.value), gain=zeros, cover=zeros).to_dict()
    search = MedianSearch(groups)
    while not search.done:
        q = search.query()
        first = shape if q.depth == 0 else None
        ask = partial(
            CollectMedian,
            of=of,
            depth=q.depth,
            width=q.width,
            group=q.group,
            prefix=q.prefix,
            tree=first,
        )
        search.feed(await fed.aggregate(ask, q.length))
    return search.middle()


async def _refit(fed: Federation, objective: Objective, tree: Tree, learning_rate: float) -> Tree:
    """L1's leaf values: the core's refit (:func:`~p2pboost.gbdt.rounds.refit_leaves`) given,
    as its rows, each leaf's middle residuals (at zero margin), whose median is the median of
    all the leaf's residuals: the core's leaves, bit for bit."""
    leaves = np.flatnonzero(tree.is_leaf).tolist()
    middle = await _middle(fed, "residuals", leaves, tree)
    values, rows_leaf = middle_rows(middle)
    margin = np.zeros((values.size, 1))
    return refit_leaves(objective, tree, values, margin, rows_leaf, None, learning_rate)


def _int64(a: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The wire's dtype for node and bin arrays (the clients accept exactly int64)."""
    return np.asarray(a, dtype=np.int64)


async def _evaluate(
    fed: Federation, config: HomoConfig, hello: Hello, n_features: int
) -> float | None:
    """The round's validation metric over every client's validation rows (``None``: none)."""
    while True:
        await fed.readmit(hello, n_features)
        try:
            total = await fed.aggregate(CollectEval, eval_length(config.metric))
            break
        except Restart:
            continue
    return read_eval(total, config.metric)
