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
                                                            histogram, sibling = parent - child
                                                    <-      info: each child's package when ready
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
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any, cast

import numpy as np

from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.exceptions import (
    DeadlineExceeded,
    InputError,
)
from p2pboost.gbdt.binning import BinMapper, check_matrix
from p2pboost.gbdt.booster import bin_eval_sets, initial_margin
from p2pboost.gbdt.callbacks import Callback
from p2pboost.gbdt.metrics import get_metric
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams, MultiStrategy
from p2pboost.gbdt.rounds import Margins, RoundLoop
from p2pboost.hetero._common import (
    VERSION,
    GuestPhase,
    HeteroConfig,
    HostPhase,
    Progress,
)
from p2pboost.hetero._guest import GuestTrainer, HostLink, model_fingerprint
from p2pboost.hetero._host import Host, Shards
from p2pboost.hetero._messages import Bye, Done, Hello, Setup
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.net.node import Session
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import PinnedPool, owned_executor

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
    executor: Executor | None = None,
    keys: tuple[AnyPublicKey, AnyPrivateKey] | None = None,
    progress: Progress | None = None,
) -> GuestModel:
    """Train as the guest (labels ``y``, features ``X``) with ``hosts`` (their party ids).

    ``eval_sets`` are ``(X_guest, y)`` pairs whose rows are aligned with the hosts'
    ``eval_sets``; ``callbacks`` (e.g. :class:`~p2pboost.gbdt.callbacks.EarlyStopping`) see
    each round's evaluation as in :func:`p2pboost.gbdt.booster.train`. ``keys`` reuses a key
    pair (of ``config.scheme``) instead of generating one.
    """
    config = config or HeteroConfig()
    params = params.validate()
    if MultiStrategy(params.multi_strategy) is not MultiStrategy.ONE_OUTPUT_PER_TREE:
        raise InputError("hetero training grows one tree per output (one_output_per_tree)")
    if not hosts or len(set(hosts)) != len(hosts):
        raise InputError("give at least one host, each once")
    objective = get_objective(params)
    y_arr = objective.check_labels(y)
    X_arr = check_matrix(X)
    if X_arr.shape[0] != y_arr.size:
        raise InputError(f"X has {X_arr.shape[0]} rows but y has {y_arr.size} labels")
    progress = progress or Progress(GuestPhase.SETUP)
    progress.enter(GuestPhase.SETUP)
    mapper = BinMapper(params.max_bin).fit(X_arr)
    data = mapper.transform(X_arr)
    evals = bin_eval_sets(objective, mapper, eval_sets, eval_names)
    metrics = [get_metric(m) for m in (eval_metrics or [objective.default_metric])]

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
    setup = Setup(VERSION, public_key, params.max_bin, params.min_samples_leaf)
    await gather_or_cancel(*(send(link.ctl, setup) for link in links))

    base = initial_margin(objective, params, y_arr)
    n_total = data.n_features + sum(link.n_features for link in links)
    # The core's round loop: the same draws, refits, margins, callbacks and early stop.
    loop = RoundLoop(params, n_total, objective.n_outputs, callbacks)
    margins = Margins(objective, y_arr, base, evals, metrics, params.learning_rate)
    n_trees = params.n_estimators * objective.n_outputs
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
        )
        try:
            for _ in loop:
                for task in loop.tasks(margins):
                    tree_id = len(loop.trees)
                    grown = await trainer.grow(tree_id, task, more=tree_id + 1 < n_trees)
                    tree = margins.update(task, grown.tree, grown.positions, grown.eval_leaves)
                    loop.add_tree(tree, task.out)
                progress.enter(GuestPhase.EVALUATE)
                loop.end_round(margins.evaluation())
        finally:
            await trainer.aclose()

        progress.enter(GuestPhase.FINISH)
        fingerprint = model_fingerprint(loop.trees)
        done = Done(fingerprint, len(loop.trees))
        await gather_or_cancel(*(send(link.ctl, done) for link in links))
        await gather_or_cancel(*(recv(link.ctl, Bye) for link in links))
    progress.enter(GuestPhase.DONE)
    return GuestModel(
        fingerprint=fingerprint,
        params=params,
        hosts=tuple(hosts),
        mapper=mapper,
        base_margin=np.asarray(base, dtype=np.float64),
        trees=loop.trees,
        tree_output=loop.tree_output,
        trees_per_round=loop.trees_per_round,
        best_iteration=loop.best_iteration,
        history=loop.history,
    )


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
    executor: Executor | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    sparse: bool | str = "auto",
) -> HostModel:
    """Train as a host with features ``X`` (rows aligned with the guest's).

    ``eval_sets`` are this host's features of the guest's evaluation sets (aligned rows).
    ``sparse``: derive each feature's most frequent bin (the zeros of sparse data) from the
    node total instead of summing its rows: ``"auto"`` where it saves additions, True for every
    feature, False never; trees are the same either way. ``progress.additions`` counts the
    ciphertext additions of the histogram builds.
    Returns this host's model part: its own splits only.

    A host keeps each tree's ciphertexts and histograms in worker processes, one row shard per
    worker (:mod:`p2pboost.hetero._kernels`), which needs a
    :class:`~p2pboost.workers.PinnedPool`. Pass one as ``executor`` (it may be shared with
    other roles and runs) and it is used as it is. Any other executor cannot keep state in a
    chosen process: the host then starts its own pinned pool of ``workers`` processes for the
    shards (shut down when training ends) and uses your executor only for compressing
    split-infos. Without an executor it starts a pinned pool and uses it for everything.
    """
    X_arr = check_matrix(X)
    if sparse not in (True, False, "auto"):
        raise InputError(f"sparse must be True, False or 'auto', not {sparse!r}")
    evals = [check_matrix(e, name="eval set", n_features=X_arr.shape[1]) for e in eval_sets]
    progress = progress or Progress(HostPhase.SETUP)
    progress.enter(HostPhase.SETUP)
    ctl, grad, info = (session.channel(guest, n) for n in ("ctl", "grad", "info"))
    n_rows, n_features = X_arr.shape
    await send(ctl, Hello(VERSION, n_rows, n_features, [int(e.shape[0]) for e in evals]))
    setup = await recv(ctl, Setup)
    if setup.version != VERSION:
        raise reject(guest, "unsupported protocol version")
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
        min_rows=setup.min_samples_leaf,
        progress=progress,
        sparse=sparse,
    )
    async with owned_executor(executor, workers, pinned=True) as (pinned, n_workers):
        assert isinstance(pinned, PinnedPool)
        host.shards = Shards(pinned)
        # Compression needs no pinning: the caller's executor when there is one.
        host.engine = CryptoEngine(setup.key, executor=executor or pinned, workers=n_workers)
        fingerprint = await host.serve()
    progress.enter(HostPhase.DONE)
    splits = tuple(sorted(host.splits, key=lambda s: (s.tree, s.node)))
    return HostModel(fingerprint, guest, host.data.n_features, splits)
