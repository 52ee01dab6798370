"""Vertical (hetero) SecureBoost training: one guest (labels) and any number of hosts; this
module is the guest's entry point, :func:`guest_train` (the host's is
:func:`p2pboost.hetero.training.host.host_train`).

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
          (sent right behind "decide", leaving the          histogram, its package with the
          owner's own out, where no other host owns <-      larger child's candidates too;
          a split of the layer)
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
the party's workers (threads under the native kernel, else processes), one task per fused step
with arrays or ciphertext bytes in and out (see ``docs/explanation/hetero.md``, "Where the work
runs"); numpy steps run in threads; the event loop only moves messages.

Each role runs by phase, one coroutine each with its own docstring: setup (every argument
checked; the guest's rows binned in a thread that overlaps the handshake), handshake (hellos),
keys (the guest's), warm start or resume (where the run starts), the round loop, and finish
(done and goodbye); the per-tree protocol is in
:mod:`p2pboost.hetero.training.guest_tree` and :mod:`p2pboost.hetero.training.host_tree`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from p2pboost.crypto import kernels
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.exceptions import DeadlineExceeded, InputError
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.booster import (
    EvalData,
    check_eval_sets,
    check_private_run,
    check_warm_start,
    initial_margin,
    node_columns,
)
from p2pboost.gbdt.callbacks import Callback
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.metrics import Metric, get_metric, leaf_purity
from p2pboost.gbdt.names import check_names
from p2pboost.gbdt.objectives import Objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import Margins, RoundLoop, check_weights, trees_per_round
from p2pboost.hetero._messages import PRIVATE_ORDERED, PRIVATE_SHUFFLED, Bye, Done, Hello, Setup
from p2pboost.hetero.config import VERSION, HeteroConfig, check_layered_depth
from p2pboost.hetero.model import GuestModel
from p2pboost.hetero.training.checkpoint import (
    GuestCheckpoint,
    RoundState,
    chain_next,
    data_digest,
    model_fingerprint,
)
from p2pboost.hetero.training.common import GuestPhase, Progress, logger
from p2pboost.hetero.training.constraints import (
    GuestConstraints,
    check_guest_constraints,
    guest_constraints,
)
from p2pboost.hetero.training.defences import purity_gate
from p2pboost.hetero.training.guest_layers import HostLink
from p2pboost.hetero.training.guest_tree import GuestTrainer
from p2pboost.hetero.training.label_dp import (
    LabelNoise,
    NoisyMargins,
    check_label_dp_run,
    label_noise,
)
from p2pboost.hetero.training.modes import FeatureSchedule
from p2pboost.hetero.training.start import GuestStart, guest_start, round_loop, warm_margins
from p2pboost.net.node import Session
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import AnyExecutor, owned_executor

__all__ = ["guest_train"]


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
    :mod:`p2pboost.hetero.training.checkpoint`); without a checkpoint there a run starts afresh.
    ``feature_names`` (default: a DataFrame's columns) go into the model, which then matches
    prediction input by name (:mod:`p2pboost.gbdt.names`). ``init_model`` (warm start)
    continues that model with ``params.n_estimators`` more rounds, as the core's ``train``
    does; every host passes its part of it (:mod:`p2pboost.hetero.training.start`).
    ``sample_weight`` (one value >= 0 per row) stays with the guest: it multiplies the
    gradients and hessians before they are encrypted, so hosts never see it.
    """
    run = _GuestRun(
        session,
        list(hosts),
        params.validate(),
        config or HeteroConfig(),
        progress or Progress(GuestPhase.SETUP),
        checkpoint,
        init_model,
        callbacks,
    )
    await _setup(
        run, X, y, eval_sets, eval_names, eval_metrics, feature_names, sample_weight, resume
    )
    try:
        hellos = await _handshake(run)
    finally:  # the binning thread ends before we do, whatever happened
        await asyncio.gather(run.binning, return_exceptions=True)
    await run.binning  # its result (an error in it, raised here)
    run.constraints = guest_constraints(
        run.params, run.names, run.data.n_features, run.hosts, hellos
    )
    public_key, private_key = await _keys(run.config, keys)
    begin, warm = await _warm_start(run, hellos, public_key)
    # The native kernel's tasks release the GIL: the pool started here is then threads.
    async with owned_executor(
        executor, run.config.workers, prefer_threads=kernels.releases_gil()
    ) as (pool, n_workers):
        engine = CryptoEngine(
            public_key,
            private_key,
            executor=pool,
            workers=n_workers,
            stash_limit=run.config.stash_bytes // public_key.ciphertext_bytes,
        )
        loop = await _rounds(run, begin, warm, engine, n_workers)
        fingerprint = await _finish(run, loop)
    run.progress.enter(GuestPhase.DONE)
    return run.model(fingerprint, loop)


@dataclass(eq=False)
class _GuestRun:
    """What the guest's phases share: the call's arguments, then what each phase found (the
    validated data, the bins, the links to the hosts, the run's identity and fingerprint
    chain)."""

    session: Session
    hosts: list[str]
    params: BoostParams
    config: HeteroConfig
    progress: Progress
    checkpoint: str | os.PathLike[str] | None
    init_model: GuestModel | None
    callbacks: Sequence[Callback]
    # -- set by _setup
    objective: Objective = field(init=False)
    y: Any = field(init=False)
    X: Features = field(init=False)
    eval_X: list[Features] = field(init=False)
    #: Rows of each evaluation set (known before they are binned).
    eval_sizes: list[int] = field(init=False)
    #: The binning and digest running in a thread from _setup until _binned.
    binning: asyncio.Future[None] = field(init=False)
    names: list[str] | None = field(init=False)
    mapper: BinMapper = field(init=False)
    data: BinnedData = field(init=False)
    evals: list[EvalData] = field(init=False)
    metrics: list[Metric] = field(init=False)
    weight: Any = field(init=False)
    digest: str = field(init=False)
    saved: GuestCheckpoint | None = field(init=False)
    # -- set by _handshake, _warm_start and _rounds
    links: list[HostLink] = field(init=False)
    begin: GuestStart = field(init=False)
    base: Any = field(init=False)
    diagnostics: dict[str, float] = field(init=False)
    chain_end: str = field(init=False)
    constraints: GuestConstraints | None = field(init=False)
    label_noise: LabelNoise | None = field(init=False, default=None)

    def model(self, fingerprint: str, loop: RoundLoop) -> GuestModel:
        """The guest's model as the round loop holds it now."""
        return _model(
            fingerprint,
            self.params,
            self.hosts,
            self.mapper,
            self.base,
            loop,
            self.names,
            self.diagnostics,
            None if self.label_noise is None else self.label_noise.record(),
        )


async def _setup(
    run: _GuestRun,
    X: Any,
    y: Any,
    eval_sets: Sequence[tuple[Any, Any]],
    eval_names: Sequence[str] | None,
    eval_metrics: Sequence[str] | None,
    feature_names: Sequence[str] | None,
    sample_weight: Any,
    resume: bool,
) -> None:
    """Setup: check every argument before a host is contacted (hosts, labels, features and
    their names, the modes against the guest's features and the tree depth, a private run's
    limits), then start binning the rows (or take a continued model's bins) and digesting the
    data in a thread (:func:`_bin`: on a million rows that overlaps the hellos), and load the
    checkpoint to resume from. Nothing is sent: a bad argument fails here, locally.

    The call's features (``X`` and the evaluation sets') are checked here, once, and become
    :class:`~p2pboost.gbdt.features.Features`; every later phase takes those."""
    params, config, init_model, hosts = run.params, run.config, run.init_model, run.hosts
    if not hosts or len(set(hosts)) != len(hosts):
        raise InputError("give at least one host, each once")
    objective = get_objective(params)
    y_arr = objective.check_labels(y)
    if init_model is not None and list(init_model.hosts) != list(hosts):
        raise InputError(f"init_model was trained with hosts {list(init_model.hosts)}")
    features = Features.from_user(
        np.empty((y_arr.size, 0)) if X is None else X,  # None: a guest with only the labels
        feature_names=feature_names,
        order=None if init_model is None else init_model.feature_names,  # a warm start
        allow_no_features=True,
    )
    names = check_names(features.names, features.n_features)
    if features.n_rows != y_arr.size:
        raise InputError(f"X has {features.n_rows} rows but y has {y_arr.size} labels")
    if features.n_features == 0:
        _check_label_only(config)
    check_guest_constraints(params, names, features.n_features)
    layered = check_layered_depth(config.host_depth, config.guest_depth, params.max_depth)
    if layered is not None:
        raise InputError(layered)
    if params.dp is not None:
        check_private_run(params, y_arr, init_model is not None, sample_weight is not None)
        if resume:
            raise InputError(
                "a differentially private run cannot resume: the rows of the current "
                "ensemble's trees would be drawn again (start it afresh)"
            )
    check_label_dp_run(config, params, objective, init_model is not None, resume)
    run.progress.enter(GuestPhase.SETUP)
    if init_model is not None:  # the core's warm start: the model's bins carry on
        check_warm_start(init_model.params, params, init_model.n_features, features.n_features)
    checked = check_eval_sets(objective, features.n_features, eval_sets, eval_names)
    metrics = [get_metric(m) for m in (eval_metrics or [objective.default_metric])]
    weight = check_weights(sample_weight, y_arr.size)
    if resume and run.checkpoint is None:
        raise InputError("resume needs the checkpoint directory to resume from")
    run.objective, run.y, run.X, run.names = objective, y_arr, features, names
    run.eval_X = [f for _, f, _ in checked]
    run.eval_sizes = [int(np.asarray(y_e).size) for _, _, y_e in checked]
    run.metrics, run.weight = metrics, weight
    # Binning and the data's digest take a while on large data and cannot fail on checked
    # arguments: they run in a thread while the hosts are greeted (guest_train waits for them
    # after the hellos), except when resuming, whose checkpoint is checked against the digest
    # before a host is contacted.
    run.saved = None
    run.binning = asyncio.ensure_future(asyncio.to_thread(_bin, run, checked))
    if resume:
        assert run.checkpoint is not None
        await run.binning
        saved = GuestCheckpoint.load(run.checkpoint)
        if saved is not None:
            saved.check_settings(run.digest, params.to_dict())
        run.saved = saved


def _bin(run: _GuestRun, checked: list[tuple[str, Features, Any]]) -> None:
    """The rows binned (or binned with a continued model's bins), the evaluation sets too,
    and the digest of the data and settings (what a checkpoint must match)."""
    params, features, y_arr = run.params, run.X, run.y
    init_model = run.init_model
    mapper = BinMapper(params.max_bin).fit(features) if init_model is None else init_model.mapper
    data = mapper.transform(features)
    evals = [EvalData(n, mapper.transform(f), y, np.empty((0, 0))) for n, f, y in checked]
    digest = data_digest(
        features.dense(),
        y_arr,
        *[a for e in evals for a in (e.data.codes, e.y)],
        list(run.hosts),
        params.to_dict(),
        *([] if run.weight is None else [run.weight]),
    )
    run.mapper, run.data, run.evals, run.digest = mapper, data, evals, digest


async def _handshake(run: _GuestRun) -> list[Hello]:
    """Handshake: open the three channels to every host and wait for each one's hello (within
    ``hello_timeout``), checking that it speaks this protocol's version and holds the same
    rows and evaluation sets; each link learns its host's feature count."""
    run.links = [
        HostLink(
            h,
            k,
            run.session.channel(h, "ctl"),
            run.session.channel(h, "grad"),
            run.session.channel(h, "info"),
            0,
        )
        for k, h in enumerate(run.hosts, start=1)
    ]
    hellos = await _hellos(run.links, run.config.hello_timeout)
    for link, hello in zip(run.links, hellos, strict=True):
        if hello.version != VERSION:
            raise reject(link.name, "unsupported protocol version")
        if hello.n_rows != run.X.n_rows:
            raise InputError(
                f"host {link.name!r} has {hello.n_rows} rows, the guest {run.X.n_rows}"
            )
        link.n_features = hello.n_features
        if hello.n_eval != run.eval_sizes:
            raise InputError(f"host {link.name!r} has other evaluation set sizes")
    return hellos


async def _keys(
    config: HeteroConfig, keys: tuple[AnyPublicKey, AnyPrivateKey] | None
) -> tuple[AnyPublicKey, AnyPrivateKey]:
    """Keys: the given pair (of ``config.scheme``), or a fresh one made in a thread (a 2048-bit
    Paillier key takes a while; the event loop keeps serving the session meanwhile)."""
    if keys is None:
        keys = await asyncio.to_thread(
            make_keypair,
            config.scheme,
            config.key_bits,
            allow_insecure=config.allow_insecure_key,
        )
    elif keys[0].scheme != config.scheme:
        raise InputError(f"keys are {keys[0].scheme} keys but config.scheme is {config.scheme!r}")
    return keys


async def _warm_start(
    run: _GuestRun, hellos: list[Hello], public_key: AnyPublicKey
) -> tuple[GuestStart, tuple[Any, list[Any]] | None]:
    """Warm start and resume: decide where the run starts from what every host brought
    (:func:`~p2pboost.hetero.training.start.guest_start`: afresh, resumed at the last tree all
    hold, or continuing ``init_model``), tell the hosts in the setup message, and for a
    continued model compute its margins with the hosts (the prediction protocol)."""
    named = [(link.name, hello) for link, hello in zip(run.links, hellos, strict=True)]
    per_round = trees_per_round(run.params, run.objective.n_outputs)
    begin = guest_start(run.saved, run.init_model, named, per_round)
    if begin.resumed is not None:
        logger.info(
            "resuming at tree %d of %d (every party holds it)",
            begin.start,
            len(begin.resumed.chain),
        )
    elif run.saved is not None:
        logger.info("starting afresh: a host holds no checkpoint of this run")
    params = run.params
    setup = Setup(
        VERSION,
        public_key,
        params.max_bin,
        params.min_samples_leaf,
        begin.run,
        begin.start,
        "" if begin.warm is None else begin.warm.fingerprint,
        begin.prefix if begin.warm is not None else [],
        _private_mode(params),
        params.min_child_weight,
    )
    asked = [False] * len(run.links) if run.constraints is None else run.constraints.tokens
    await gather_or_cancel(
        *(
            send(link.ctl, replace(setup, tokens=ask))
            for link, ask in zip(run.links, asked, strict=True)
        )
    )
    warm = None
    if begin.warm is not None:  # still setup: the continued model's margins
        warm = await warm_margins(run.session, begin.warm, run.X, run.eval_X)
    run.begin = begin
    return begin, warm


async def _rounds(
    run: _GuestRun,
    begin: GuestStart,
    warm: tuple[Any, list[Any]] | None,
    engine: CryptoEngine,
    n_workers: int,
) -> RoundLoop:
    """The round loop: the core's loop (draws, margins, callbacks, early stop) in the mode's
    feature schedule, each tree grown with the hosts by a
    :class:`~p2pboost.hetero.training.guest_tree.GuestTrainer` and chained into the run's
    fingerprints, a checkpoint written after every round. The trainer's background work
    (randomisers made while the hosts compute) lives inside this call and stops with it."""
    params, config, init_model, links = run.params, run.config, run.init_model, run.links
    objective, y_arr = run.objective, run.y
    run.base = (
        initial_margin(objective, params, y_arr) if init_model is None else init_model.base_margin
    )
    n_total = run.data.n_features + sum(link.n_features for link in links)
    schedule = FeatureSchedule(
        (run.data.n_features, *(link.n_features for link in links)),
        config.complete_secure,
        config.tree_num_per_party,
        config.host_depth,
        config.guest_depth,
    )
    gate = purity_gate(config, schedule, params.dp is not None)
    # Label DP: noise on every round's gradients before anything reads them (the gate too).
    noise = run.label_noise = label_noise(config, params, objective, run.weight)
    if noise is not None and init_model is None and params.base_score is None:
        run.base = noise.base_margin(y_arr)  # the labels' mean, noisy
    given = (objective, y_arr, run.base, run.evals, run.metrics, params.learning_rate, run.weight)
    margins = Margins(*given) if noise is None else NoisyMargins(noise, *given)
    loop, chain, states = round_loop(
        params,
        n_total,
        objective.n_outputs,
        run.callbacks,
        margins,
        begin,
        warm,
        gate if gate is not None else schedule.by_round(),
        0 if init_model is None else init_model.n_rounds,
    )
    n_trees = params.n_estimators * trees_per_round(params, objective.n_outputs)
    kept = begin.resumed.model if begin.resumed is not None else begin.warm
    run.diagnostics = dict(kept.diagnostics) if kept is not None else {}
    classification = objective.name in ("binary:logistic", "multi:softmax")
    trainer = GuestTrainer(
        params=params,
        config=config,
        engine=engine,
        workers=n_workers,
        links=links,
        mapper=run.mapper,
        data=run.data,
        evals=run.evals,
        progress=run.progress,
        features_by_depth=(
            schedule.guest_by_depth() if gate is None else gate.by_depth(schedule.guest_by_depth())
        ),
        host_layers=schedule.host_layers,
        constraints=run.constraints,
    )
    async with trainer:
        for it in loop:
            for task in loop.tasks(margins):
                tree_id = len(loop.trees)
                more = tree_id + 1 < n_trees
                columns = node_columns(params, loop.rng, task.features)
                grown = await trainer.grow(tree_id, task, chain[-1], more=more, columns=columns)
                if gate is not None and task.out <= 0:
                    gate.observe(it, task.grad, grown.positions)
                    run.diagnostics.update(gate.diagnostics())
                tree = margins.update(task, grown.tree, grown.positions, grown.eval_leaves)
                loop.add_tree(tree, task.out)
                if params.dp is None:  # a label statistic: not in a private model
                    shared = bool(task.features[run.data.n_features :].any())
                    _diagnose(run.diagnostics, it, shared, y_arr, grown.positions, classification)
                chain.append(chain_next(chain[-1], tree, begin.secret))
            run.progress.enter(GuestPhase.EVALUATE)
            loop.end_round(margins.evaluation())
            if run.checkpoint is not None:
                now = RoundState(
                    it + 1,
                    loop.rng_state,
                    margins.margin.copy(),
                    [ev.margin.copy() for ev in margins.evals],
                )
                states = [*states[-1:], now]
                ckpt = GuestCheckpoint(
                    run.model(begin.run, loop), chain[1:], states, run.digest, begin.secret
                )
                await asyncio.to_thread(ckpt.save, run.checkpoint)
    run.chain_end = chain[-1]
    return loop


async def _finish(run: _GuestRun, loop: RoundLoop) -> str:
    """Finish: the model's fingerprint and the chain's last link go to every host in the done
    message, and every host's goodbye is awaited, so a host that lost a tree fails the run here
    rather than keeping a model the guest does not have."""
    run.progress.enter(GuestPhase.FINISH)
    fingerprint = model_fingerprint(loop.trees)
    done = Done(fingerprint, len(loop.trees), run.chain_end)
    await gather_or_cancel(*(send(link.ctl, done) for link in run.links))
    await gather_or_cancel(*(recv(link.ctl, Bye) for link in run.links))
    return fingerprint


def _model(
    fingerprint: str,
    params: BoostParams,
    hosts: Sequence[str],
    mapper: BinMapper,
    base: Any,
    loop: RoundLoop,
    names: list[str] | None,
    diagnostics: dict[str, float],
    label_privacy: dict[str, Any] | None = None,
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
        label_privacy=label_privacy,
    )


def _check_label_only(config: HeteroConfig) -> None:
    """A guest without features: the modes that need its features are refused, naming them."""
    for name in ("complete_secure", "tree_num_per_party", "host_depth", "purity_bound"):
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
    shared: bool,
    y: Any,
    positions: Any,
    classification: bool,
) -> None:
    """The leaf purity of the first tree, and of the first tree the hosts take part in
    (``shared``: the round's trees may split on a host's features; after ``complete_secure``,
    after the purity gate opened, a mix round of theirs): what a host could infer of the
    labels from the first instance spaces it sees
    (:func:`~p2pboost.gbdt.metrics.leaf_purity`)."""
    purity = None
    for key, due in (
        ("leaf_purity_first_tree", round_ == 0),
        ("leaf_purity_first_shared_tree", shared),
    ):
        if key not in diagnostics and due:
            if purity is None:
                purity = leaf_purity(y, positions, classification)
            diagnostics[key] = round(purity, 6)


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
