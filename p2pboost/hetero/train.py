"""Vertical (hetero) SecureBoost training: one guest (labels) and any number of hosts.

One coroutine per role, over a node session; the guest and every host hold the same rows in
the same order (align them first with :mod:`p2pboost.protocols.psi`). Per tree::

    guest                                                   host (each)
    -----                                                   ----
    g, h (objective) -> fixed-point grid -> packed
    ctl:  "tree" (grids, sampled rows, features)      ->
    grad: Enc(packed g/h) in chunks, encrypted in     ->    root histogram, chunk by chunk
          the process pool while earlier chunks fly
    own root histogram (plaintext)                    <-    info: root split-infos, shuffled,
                                                            opaque ids, compressed
    per layer:
      decrypt packages as they arrive, unpack, gains
      (core formula), own candidates compete; per node
      the best by the core's rule
    ctl:  "decide" tied opaque ids (owner only)       ->    picks the lowest (feature, bin,
                                                    <-      direction), returns the left set
                                                            (bitmap) and validation bits
    ctl:  "layer" left-set bitmaps of every split     ->    repartitions; smaller child's
                                                            histogram, its package with the
                                                    <-      larger child's candidates too;
    larger child's sums = parent's - smaller's      <-      info: "derived" for the larger
                                                            child (ids, counts, no ciphertext)
    leaf weights (guest only)

Lossless: the guest's gradients sit on the plaintext core's power-of-two grid
(:mod:`p2pboost.gbdt.fixedpoint`), so the decrypted sums equal the core's plaintext sums
*exactly*, and every gain is computed by the core's own function; the tie-break is the core's
(highest gain, then lowest global feature index with guest features first and host ``k``
before host ``k+1``, then lowest bin, then missing-left). Within one host the guest cannot
order the shuffled ids, so it sends the owner *all* ids tied at the best gain and the owner
picks the lowest (feature, bin, direction): the guest learns which id was chosen (it needs
its sums) and nothing about the others. The result is tree for tree what
:func:`p2pboost.gbdt.booster.train` grows on the joined data.

What a host sees: ciphertexts, the sampled rows, which rows go left at each split (needed to
build histograms), the fixed-point grid exponents, and the number of trees. It never sees a
label, gradient, hessian, gain or leaf weight. What the guest sees from a host: per candidate
an opaque id, its left row count and decrypted left sums; per split it wins, the left set. It
never sees a host feature value, feature index or threshold.

Every message from a peer is validated (type, shape, dtype, ranges, known ids, bitmap lengths,
counts); a violation raises :class:`~p2pboost.exceptions.RemoteProtocolError` naming the peer.
CPU-heavy work (encryption, decryption, ciphertext histograms, compression, packing) runs in
worker processes, one task per fused step with arrays or ciphertext bytes in and out (see
``docs/explanation/hetero.md``, "Where the work runs"); numpy steps run in threads; the event
loop only moves messages.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any, cast

import numpy as np

from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.exceptions import (
    CheckpointError,
    DeadlineExceeded,
    InputError,
)
from p2pboost.gbdt.binning import BinMapper, check_features, check_matrix
from p2pboost.gbdt.booster import (
    bin_eval_sets,
    check_private_run,
    check_warm_start,
    initial_margin,
    node_columns,
)
from p2pboost.gbdt.callbacks import Callback
from p2pboost.gbdt.metrics import get_metric, leaf_purity
from p2pboost.gbdt.names import by_name, check_names, names_of
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import Margins, RoundLoop, check_weights, trees_per_round
from p2pboost.hetero._common import (
    VERSION,
    GuestPhase,
    HeteroConfig,
    HostPhase,
    Progress,
    logger,
)
from p2pboost.hetero._guest import GuestTrainer, HostLink
from p2pboost.hetero._host import Host, Shards
from p2pboost.hetero._messages import PRIVATE_ORDERED, PRIVATE_SHUFFLED, Bye, Done, Hello, Setup
from p2pboost.hetero._start import (
    HostLedger,
    guest_start,
    host_warm,
    round_loop,
    warm_margins,
)
from p2pboost.hetero.checkpoint import (
    GuestCheckpoint,
    HostCheckpoint,
    RoundState,
    chain_next,
    data_digest,
    model_fingerprint,
)
from p2pboost.hetero.model import GuestModel, HostModel, HostSplit
from p2pboost.hetero.modes import FeatureSchedule
from p2pboost.net.node import Session
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import AnyExecutor, PinnedExecutor, owned_executor

__all__ = [
    "GuestPhase",
    "HeteroConfig",
    "HostPhase",
    "Progress",
    "guest_train",
    "host_train",
]


async def guest_train(
    session: Session,
    hosts: Sequence[str],
    X: Any,
    y: Any,
    params: BoostParams,
    *,
    eval_sets: Sequence[tuple[Any, Any]] = (),
    eval_names: Sequence[str] | None = None,
    eval_metrics: Sequence[str] | None = None,
    callbacks: Sequence[Callback] = (),
    config: HeteroConfig | None = None,
    executor: AnyExecutor | None = None,
    keys: tuple[AnyPublicKey, AnyPrivateKey] | None = None,
    progress: Progress | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: bool = False,
    feature_names: Sequence[str] | None = None,
    init_model: GuestModel | None = None,
    sample_weight: Any = None,
) -> GuestModel:
    """Train as the guest (labels ``y``, features ``X``) with ``hosts`` (their party ids).

    ``eval_sets`` are ``(X_guest, y)`` pairs whose rows are aligned with the hosts'
    ``eval_sets``; ``callbacks`` (e.g. :class:`~p2pboost.gbdt.callbacks.EarlyStopping`) see
    each round's evaluation as in :func:`p2pboost.gbdt.booster.train`. ``keys`` reuses a key
    pair (of ``config.scheme``) instead of generating one.

    ``checkpoint``: a directory where the guest writes its checkpoint after every round;
    ``resume``: continue from it (and from the hosts' checkpoints) at the last round every
    party holds, to the model an uninterrupted run grows (see
    :mod:`p2pboost.hetero.checkpoint`); without a checkpoint there a run starts afresh.
    ``feature_names`` (default: a DataFrame's columns) go into the model, which then matches
    prediction input by name (:mod:`p2pboost.gbdt.names`). ``init_model`` (warm start)
    continues that model with ``params.n_estimators`` more rounds, as the core's ``train``
    does; every host passes its part of it (:mod:`p2pboost.hetero._start`).
    ``sample_weight`` (one value >= 0 per row) stays with the guest: it multiplies the
    gradients and hessians before they are encrypted, so hosts never see it.
    """
    config = config or HeteroConfig()
    params = params.validate()
    if not hosts or len(set(hosts)) != len(hosts):
        raise InputError("give at least one host, each once")
    objective = get_objective(params)
    y_arr = objective.check_labels(y)
    given = names_of(X) if feature_names is None else list(feature_names)
    if init_model is not None:
        if list(init_model.hosts) != list(hosts):
            raise InputError(f"init_model was trained with hosts {list(init_model.hosts)}")
        if init_model.feature_names is not None and given is not None:
            X, given = by_name(X, init_model.feature_names), init_model.feature_names
    if X is None:  # a guest that holds only the labels
        X = np.empty((y_arr.size, 0))
    X_arr = check_matrix(X, allow_no_features=True)
    names = check_names(given, X_arr.shape[1])
    if X_arr.shape[0] != y_arr.size:
        raise InputError(f"X has {X_arr.shape[0]} rows but y has {y_arr.size} labels")
    if X_arr.shape[1] == 0:
        _check_label_only(config)
    if config.host_depth and config.host_depth + config.guest_depth != params.max_depth:
        raise InputError(
            f"layered mode grows host_depth + guest_depth = "
            f"{config.host_depth + config.guest_depth} layers: set max_depth to that, not "
            f"{params.max_depth}"
        )
    if params.dp is not None:
        check_private_run(params, y_arr, init_model is not None, sample_weight is not None)
        if resume:
            raise InputError(
                "a differentially private run cannot resume: the rows of the current "
                "ensemble's trees would be drawn again (start it afresh)"
            )
    progress = progress or Progress(GuestPhase.SETUP)
    progress.enter(GuestPhase.SETUP)
    if init_model is None:
        mapper = BinMapper(params.max_bin).fit(X_arr)
    else:  # the core's warm start: the model's bins carry on
        check_warm_start(init_model.params, params, init_model.n_features, X_arr.shape[1])
        mapper = init_model.mapper
    data = mapper.transform(X_arr)
    evals = bin_eval_sets(objective, mapper, eval_sets, eval_names)
    metrics = [get_metric(m) for m in (eval_metrics or [objective.default_metric])]
    weight = check_weights(sample_weight, y_arr.size)
    if resume and checkpoint is None:
        raise InputError("resume needs the checkpoint directory to resume from")
    digest = data_digest(
        X_arr,
        y_arr,
        *[a for e in evals for a in (e.data.codes, e.y)],
        list(hosts),
        params.to_dict(),
        *([] if weight is None else [weight]),
    )
    saved = GuestCheckpoint.load(checkpoint) if resume and checkpoint is not None else None
    if saved is not None:
        saved.check_settings(digest, params.to_dict())

    links = [
        HostLink(
            h,
            k,
            session.channel(h, "ctl"),
            session.channel(h, "grad"),
            session.channel(h, "info"),
            0,
        )
        for k, h in enumerate(hosts, start=1)
    ]
    hellos = await _hellos(links, config.hello_timeout)
    for link, hello in zip(links, hellos, strict=True):
        if hello.version != VERSION:
            raise reject(link.name, "unsupported protocol version")
        if hello.n_rows != data.n_rows:
            raise InputError(f"host {link.name!r} has {hello.n_rows} rows, the guest {data.n_rows}")
        link.n_features = hello.n_features
        if hello.n_eval != [e.y.size for e in evals]:
            raise InputError(f"host {link.name!r} has other evaluation set sizes")

    if keys is None:
        keys = await asyncio.to_thread(
            make_keypair,
            config.scheme,
            config.key_bits,
            allow_insecure=config.allow_insecure_key,
        )
    elif keys[0].scheme != config.scheme:
        raise InputError(f"keys are {keys[0].scheme} keys but config.scheme is {config.scheme!r}")
    public_key, private_key = keys
    named = [(link.name, hello) for link, hello in zip(links, hellos, strict=True)]
    per_round = trees_per_round(params, objective.n_outputs)
    begin = guest_start(saved, init_model, named, per_round)
    if begin.resumed is not None:
        logger.info(
            "resuming at tree %d of %d (every party holds it)",
            begin.start,
            len(begin.resumed.chain),
        )
    elif saved is not None:
        logger.info("starting afresh: a host holds no checkpoint of this run")
    run, secret = begin.run, begin.secret
    setup = Setup(
        VERSION,
        public_key,
        params.max_bin,
        params.min_samples_leaf,
        run,
        begin.start,
        "" if begin.warm is None else begin.warm.fingerprint,
        begin.prefix if begin.warm is not None else [],
        _private_mode(params),
        params.min_child_weight,
    )
    await gather_or_cancel(*(send(link.ctl, setup) for link in links))
    warm = None
    if begin.warm is not None:  # still setup: the continued model's margins
        warm = await warm_margins(session, begin.warm, X_arr, [e[0] for e in eval_sets])

    base = (
        initial_margin(objective, params, y_arr) if init_model is None else init_model.base_margin
    )
    n_total = data.n_features + sum(link.n_features for link in links)
    schedule = FeatureSchedule(
        (data.n_features, *(link.n_features for link in links)),
        config.complete_secure,
        config.tree_num_per_party,
        config.host_depth,
        config.guest_depth,
    )
    margins = Margins(objective, y_arr, base, evals, metrics, params.learning_rate, weight)
    loop, chain, states = round_loop(
        params,
        n_total,
        objective.n_outputs,
        callbacks,
        margins,
        begin,
        warm,
        schedule.by_round(),
        0 if init_model is None else init_model.n_rounds,
    )
    n_trees = params.n_estimators * per_round
    kept = begin.resumed.model if begin.resumed is not None else begin.warm
    diagnostics = dict(kept.diagnostics) if kept is not None else {}
    classification = objective.name in ("binary:logistic", "multi:softmax")
    async with owned_executor(executor, config.workers) as (pool, n_workers):
        engine = CryptoEngine(
            public_key,
            private_key,
            executor=pool,
            workers=n_workers,
            stash_limit=config.stash_bytes // public_key.ciphertext_bytes,
        )
        trainer = GuestTrainer(
            params=params,
            config=config,
            engine=engine,
            workers=n_workers,
            links=links,
            mapper=mapper,
            data=data,
            evals=evals,
            progress=progress,
            features_by_depth=schedule.guest_by_depth(),
            host_layers=schedule.host_layers,
        )
        try:
            for it in loop:
                for task in loop.tasks(margins):
                    tree_id = len(loop.trees)
                    more = tree_id + 1 < n_trees
                    columns = node_columns(params, loop.rng, task.features)
                    grown = await trainer.grow(tree_id, task, chain[-1], more=more, columns=columns)
                    tree = margins.update(task, grown.tree, grown.positions, grown.eval_leaves)
                    loop.add_tree(tree, task.out)
                    if params.dp is None:  # a label statistic: not in a private model
                        _diagnose(diagnostics, it, config, y_arr, grown.positions, classification)
                    chain.append(chain_next(chain[-1], tree, secret))
                progress.enter(GuestPhase.EVALUATE)
                loop.end_round(margins.evaluation())
                if checkpoint is not None:
                    now = RoundState(
                        it + 1,
                        loop.rng_state,
                        margins.margin.copy(),
                        [ev.margin.copy() for ev in margins.evals],
                    )
                    states = [*states[-1:], now]
                    ckpt = GuestCheckpoint(
                        _model(run, params, hosts, mapper, base, loop, names, diagnostics),
                        chain[1:],
                        states,
                        digest,
                        secret,
                    )
                    await asyncio.to_thread(ckpt.save, checkpoint)
        finally:
            await trainer.aclose()

        progress.enter(GuestPhase.FINISH)
        fingerprint = model_fingerprint(loop.trees)
        done = Done(fingerprint, len(loop.trees), chain[-1])
        await gather_or_cancel(*(send(link.ctl, done) for link in links))
        await gather_or_cancel(*(recv(link.ctl, Bye) for link in links))
    progress.enter(GuestPhase.DONE)
    return _model(fingerprint, params, hosts, mapper, base, loop, names, diagnostics)


def _model(
    fingerprint: str,
    params: BoostParams,
    hosts: Sequence[str],
    mapper: BinMapper,
    base: Any,
    loop: RoundLoop,
    names: list[str] | None,
    diagnostics: dict[str, float],
) -> GuestModel:
    """The guest's model as the round loop holds it now."""
    return GuestModel(
        fingerprint=fingerprint,
        params=params,
        hosts=tuple(hosts),
        mapper=mapper,
        base_margin=np.asarray(base, dtype=np.float64),
        trees=list(loop.trees),
        tree_output=list(loop.tree_output),
        trees_per_round=loop.trees_per_round,
        best_iteration=loop.best_iteration,
        history={s: {m: list(v) for m, v in per.items()} for s, per in loop.history.items()},
        feature_names=names,
        rng_state=loop.rng_state,
        diagnostics=dict(diagnostics),
        privacy=None if loop.privacy is None else loop.privacy.record(),
        filtered_rows=None if loop.privacy is None else loop.privacy.filtered_rows,
    )


def _check_label_only(config: HeteroConfig) -> None:
    """A guest without features: the modes that need its features are refused, naming them."""
    for name in ("complete_secure", "tree_num_per_party", "host_depth"):
        if getattr(config, name):
            raise InputError(
                f"{name} needs the guest's features, and this guest holds only the labels "
                f"(X has no columns): leave {name} at 0"
            )


def _private_mode(params: BoostParams) -> int:
    """``Setup.private`` for ``params``: a private run's hosts offer every candidate, in the
    core's order when a test noise seed makes the run replayable."""
    if params.dp is None:
        return 0
    return PRIVATE_SHUFFLED if params.dp.noise_seed is None else PRIVATE_ORDERED


def _diagnose(
    diagnostics: dict[str, float],
    round_: int,
    config: HeteroConfig,
    y: Any,
    positions: Any,
    classification: bool,
) -> None:
    """The leaf purity of the first tree, and of the first tree the hosts take part in (after
    ``complete_secure``): what a host could infer of the labels from the first instance
    spaces it sees (:func:`~p2pboost.gbdt.metrics.leaf_purity`)."""
    purity = None
    for key, first in (
        ("leaf_purity_first_tree", 0),
        ("leaf_purity_first_shared_tree", config.complete_secure),
    ):
        if key not in diagnostics and round_ == first:
            if purity is None:
                purity = leaf_purity(y, positions, classification)
            diagnostics[key] = round(purity, 6)


# -- host --------------------------------------------------------------------------------------


async def _hellos(links: Sequence[HostLink], seconds: float) -> list[Hello]:
    """Every host's first message, within ``seconds``: a host that fails fails the wait at
    once; hosts that say nothing in time are named in a DeadlineExceeded (which is why this
    is not a plain ``asyncio.timeout``)."""
    waits = [asyncio.ensure_future(recv(link.ctl, Hello)) for link in links]
    try:
        done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        for fut in done:
            if fut.exception() is not None:
                raise cast(BaseException, fut.exception())
        silent = [link.name for link, fut in zip(links, waits, strict=True) if not fut.done()]
        if silent:
            raise DeadlineExceeded(
                f"host(s) {silent} did not start training within {seconds:g} s "
                "(HeteroConfig.hello_timeout): check that they run the training task with this "
                "guest, with the same settings (PSI on both sides or on neither)"
            )
        return [fut.result() for fut in waits]
    finally:
        for fut in waits:
            fut.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def host_train(
    session: Session,
    guest: str,
    X: Any,
    *,
    eval_sets: Sequence[Any] = (),
    executor: AnyExecutor | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    sparse: bool | str = "auto",
    checkpoint: str | os.PathLike[str] | None = None,
    resume: bool = False,
    feature_names: Sequence[str] | None = None,
    init_model: HostModel | None = None,
    dp_replay: bool = False,
    memory_budget_mb: float | None = None,
) -> HostModel:
    """Train as a host with features ``X`` (rows aligned with the guest's).

    ``eval_sets`` are this host's features of the guest's evaluation sets (aligned rows).
    ``sparse``: derive each feature's most frequent bin (the zeros of sparse data) from the
    node total instead of summing its rows: ``"auto"`` where it saves additions, True for every
    feature, False never; trees are the same either way. ``progress.additions`` counts the
    ciphertext additions of the histogram builds.
    Returns this host's model part: its own splits only. ``checkpoint``: a directory where
    the host writes its checkpoint after every tree; ``resume``: offer it to the guest, which
    decides where every party continues (:mod:`p2pboost.hetero.checkpoint`).
    ``feature_names`` (default: a DataFrame's columns) stay in this host's model part.
    ``init_model``: this host's part of the model the guest continues (warm start).
    ``dp_replay``: take part in a differentially private run with a test noise seed, whose
    candidates go to the guest in the core's order instead of shuffled (tests only).
    ``memory_budget_mb`` bounds the encrypted histograms kept from one layer to the next
    (over all shards): past it, a split's children are built from their rows instead of by
    subtraction (more additions, the same trees; :mod:`p2pboost.hetero._kernels`). Only trees
    with per-level or per-node column draws, and private trees, keep any: otherwise the guest
    derives each split's larger child and the host keeps only counts.

    A host keeps each tree's ciphertexts and histograms in worker processes, one row shard per
    worker (:mod:`p2pboost.hetero._kernels`), which needs a
    :class:`~p2pboost.workers.PinnedPool`. Pass one as ``executor`` (it may be shared with
    other roles and runs) and it is used as it is; a ``distributed.Client`` (or a
    :class:`~p2pboost.workers.ClusterPool`) keeps the shards on a Dask cluster's workers.
    Any other executor cannot keep state in a chosen process: the host then starts its own
    pinned pool of ``workers`` processes for the shards (shut down when training ends) and
    uses your executor only for compressing split-infos. Without an executor it starts a
    pinned pool and uses it for everything.
    """
    given = names_of(X) if feature_names is None else list(feature_names)
    if init_model is not None:
        if init_model.guest != guest:
            raise InputError(f"init_model was trained with guest {init_model.guest!r}")
        if init_model.feature_names is not None and given is not None:
            X, given = by_name(X, init_model.feature_names), init_model.feature_names
    X_arr = check_features(X)  # a scipy.sparse matrix stays sparse
    names = check_names(given, X_arr.shape[1])
    if sparse not in (True, False, "auto"):
        raise InputError(f"sparse must be True, False or 'auto', not {sparse!r}")
    if memory_budget_mb is not None and not memory_budget_mb >= 0:
        raise InputError(f"memory_budget_mb must be >= 0 (or None), not {memory_budget_mb!r}")
    evals = [check_features(e, name="eval set", n_features=X_arr.shape[1]) for e in eval_sets]
    progress = progress or Progress(HostPhase.SETUP)
    progress.enter(HostPhase.SETUP)
    ctl, grad, info = (session.channel(guest, n) for n in ("ctl", "grad", "info"))
    n_rows, n_features = X_arr.shape
    if resume and checkpoint is None:
        raise InputError("resume needs the checkpoint directory to resume from")
    digest = data_digest(X_arr, *evals)
    saved = HostCheckpoint.load(checkpoint, guest) if resume and checkpoint is not None else None
    if saved is not None and saved.digest != digest:
        raise CheckpointError(
            "the host's checkpoint was written for other data (its rows, features or "
            "evaluation sets differ): resume with the data it was trained on, or start afresh"
        )
    run, chain = (saved.run, saved.chain) if saved is not None else ("", [])
    evals_rows = [int(e.shape[0]) for e in evals]
    init = "" if init_model is None else init_model.fingerprint
    await send(ctl, Hello(VERSION, n_rows, n_features, evals_rows, run, chain, init))
    setup = await recv(ctl, Setup)
    if setup.version != VERSION:
        raise reject(guest, "unsupported protocol version")
    if setup.private == PRIVATE_ORDERED and not dp_replay:
        raise reject(
            guest,
            "asks for a private run with the candidates in order (a test noise seed), which "
            "shows it their order; this host allows that only with dp_replay=True",
        )
    kept: list[HostSplit] = []
    if setup.init:  # a warm start: the model's trees, and the chain over them
        if init_model is None or setup.init != init_model.fingerprint:
            raise reject(guest, "continues a model this host was not given")
        if any(s.tree >= setup.start for s in init_model.splits):
            raise reject(guest, "continues a model with fewer trees than this host's part")
        kept, chain = list(init_model.splits), setup.chain
        await host_warm(session, init_model, X_arr, evals)
    elif setup.start:
        if saved is None or setup.run != saved.run or len(saved.chain) < setup.start:
            raise reject(guest, f"resumes at tree {setup.start} of a run this host does not hold")
        kept = [s for s in saved.model.splits if s.tree < setup.start]
        logger.info("resuming at tree %d of %d, as the guest asks", setup.start, len(saved.chain))
    ledger = HostLedger(checkpoint, guest, setup.run, n_features, digest, chain[: setup.start])
    mapper = BinMapper(setup.max_bin).fit(X_arr)
    host = Host(
        guest=guest,
        ctl=ctl,
        grad=grad,
        info=info,
        public_key=setup.key,
        mapper=mapper,
        data=mapper.transform(X_arr),
        evals=[mapper.transform(e) for e in evals],
        min_rows=0 if setup.private else setup.min_samples_leaf,
        min_child_weight=setup.min_child_weight,
        progress=progress,
        private=setup.private,
        sparse=sparse,
        hist_budget=None if memory_budget_mb is None else int(memory_budget_mb * 2**20),
        splits=kept,
        start=setup.start,
        on_tree=ledger.tree_done,
    )
    async with owned_executor(executor, workers, pinned=True) as (pinned, n_workers):
        assert isinstance(pinned, PinnedExecutor)
        host.shards = Shards(pinned)
        # Compression needs no pinning: the caller's executor when there is one.
        plain = executor if isinstance(executor, Executor) else pinned  # a Dask client: its pool
        host.engine = CryptoEngine(setup.key, executor=plain, workers=n_workers)
        fingerprint = await host.serve()
    progress.enter(HostPhase.DONE)
    splits = tuple(sorted(host.splits, key=lambda s: (s.tree, s.node)))
    return HostModel(fingerprint, guest, host.data.n_features, splits, names)
