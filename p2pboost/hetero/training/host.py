"""A host's side of vertical training: :func:`host_train`, by phase.

The protocol both roles follow, and what each sees, is described in
:mod:`p2pboost.hetero.training.guest`; a host's per-tree work is
:class:`~p2pboost.hetero.training.host_tree.Host`. Here are the phases around it, one
coroutine each: setup (every argument checked, the data digested, a checkpoint loaded),
handshake (this host's hello, the guest's setup with its public key), warm start or resume
(the splits kept), the round loop (the tree protocol in a pinned pool) and finish (this host's
model part).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from p2pboost.crypto import kernels
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.exceptions import CheckpointError, InputError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.names import check_names
from p2pboost.hetero._messages import PRIVATE_ORDERED, Hello, Setup
from p2pboost.hetero.config import VERSION
from p2pboost.hetero.model import HostModel, HostSplit
from p2pboost.hetero.training.checkpoint import HostCheckpoint, data_digest
from p2pboost.hetero.training.common import HostPhase, Progress, logger
from p2pboost.hetero.training.constraints import HostDeclaration, host_declaration
from p2pboost.hetero.training.host_tree import Host, Shards
from p2pboost.hetero.training.start import HostLedger, host_warm
from p2pboost.net.node import Channel, Session
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.workers import AnyExecutor, PinnedExecutor, owned_executor

__all__ = ["host_train"]


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
    monotone_constraints: Any = None,
    interaction_constraints: Any = None,
) -> HostModel:
    """Train as a host with features ``X`` (rows aligned with the guest's).

    ``eval_sets`` are this host's features of the guest's evaluation sets (aligned rows).
    ``sparse``: derive each feature's most frequent bin (the zeros of sparse data) from the
    node total instead of summing its rows: ``"auto"`` where it saves additions, True for every
    feature, False never; trees are the same either way. ``progress.additions`` counts the
    ciphertext additions of the histogram builds.
    Returns this host's model part: its own splits only. ``checkpoint``: a directory where
    the host writes its checkpoint after every tree; ``resume``: offer it to the guest, which
    decides where every party continues (:mod:`p2pboost.hetero.training.checkpoint`).
    ``feature_names`` (default: a DataFrame's columns) stay in this host's model part.
    ``init_model``: this host's part of the model the guest continues (warm start).
    ``dp_replay``: take part in a differentially private run with a test noise seed, whose
    candidates go to the guest in the core's order instead of shuffled (tests only).
    ``memory_budget_mb`` bounds the encrypted histograms kept from one layer to the next
    (over all shards): past it, a split's children are built from their rows instead of by
    subtraction (more additions, the same trees; :mod:`p2pboost.hetero.training.shards`). Only trees
    with per-level or per-node column draws, and private trees, keep any: otherwise the guest
    derives each split's larger child and the host keeps only counts.
    ``monotone_constraints``: the directions (-1/0/1) of this host's own features, a mapping by
    name (or one per feature); ``interaction_constraints``: the run's groups of feature names,
    the same as every party's (names of other parties' features are ignored here). The guest
    learns the directions and group memberships of anonymous feature tokens, never a name
    (:mod:`p2pboost.hetero.training.constraints`).

    A host keeps each tree's ciphertexts and histograms in worker processes, one row shard per
    worker (:mod:`p2pboost.hetero.training.shards`), which needs a
    :class:`~p2pboost.workers.PinnedPool`. Pass one as ``executor`` (it may be shared with
    other roles and runs) and it is used as it is; a ``distributed.Client`` (or a
    :class:`~p2pboost.workers.ClusterPool`) keeps the shards on a Dask cluster's workers.
    Any other executor cannot keep state in a chosen process: the host then starts its own
    pinned pool of ``workers`` processes for the shards (shut down when training ends) and
    uses your executor only for compressing split-infos. Without an executor it starts a
    pinned pool and uses it for everything.
    """
    run = _HostRun(session, guest, progress or Progress(HostPhase.SETUP), checkpoint, init_model)
    await _setup(
        run,
        X,
        eval_sets,
        sparse,
        resume,
        feature_names,
        memory_budget_mb,
        (monotone_constraints, interaction_constraints),
    )
    setup = await _handshake(run, dp_replay)
    kept, chain = await _warm_start(run, setup)
    ledger = HostLedger(
        checkpoint, guest, setup.run, run.n_features, run.digest, chain[: setup.start]
    )
    host = _host(run, setup, kept, sparse, memory_budget_mb, ledger)
    fingerprint = await _rounds(host, setup, executor, workers)
    return await _finish(run, host, fingerprint)


@dataclass(eq=False)
class _HostRun:
    """What a host's phases share: the call's arguments, then the validated data, its digest
    and the checkpoint to resume from."""

    session: Session
    guest: str
    progress: Progress
    checkpoint: str | os.PathLike[str] | None
    init_model: HostModel | None
    # -- set by _setup
    X: Features = field(init=False)
    names: list[str] | None = field(init=False)
    evals: list[Features] = field(init=False)
    channels: tuple[Channel, Channel, Channel] = field(init=False)
    n_features: int = field(init=False)
    digest: str = field(init=False)
    saved: HostCheckpoint | None = field(init=False)
    declared: HostDeclaration = field(init=False)


async def _setup(
    run: _HostRun,
    X: Any,
    eval_sets: Sequence[Any],
    sparse: bool | str,
    resume: bool,
    feature_names: Sequence[str] | None,
    memory_budget_mb: float | None,
    constraints: tuple[Any, Any],
) -> None:
    """Setup: check every argument before the guest is answered (features and their names, a
    continued model's guest, the sparse and memory settings, the evaluation sets, the declared
    ``(monotone, interaction)`` constraints), open the three channels to the guest, digest the
    data and the declared constraints and load the checkpoint to resume from, refusing one
    written for other data or other constraints. The features (``X`` and the evaluation sets') are
    checked here, once, and become :class:`~p2pboost.gbdt.features.Features` (a
    scipy.sparse matrix stays sparse); every later phase takes those."""
    guest, init_model = run.guest, run.init_model
    if init_model is not None and init_model.guest != guest:
        raise InputError(f"init_model was trained with guest {init_model.guest!r}")
    features = Features.from_user(
        X,
        feature_names=feature_names,
        order=None if init_model is None else init_model.feature_names,  # a warm start
        sparse=True,
    )
    run.names = check_names(features.names, features.n_features)
    if sparse not in (True, False, "auto"):
        raise InputError(f"sparse must be True, False or 'auto', not {sparse!r}")
    if memory_budget_mb is not None and not memory_budget_mb >= 0:
        raise InputError(f"memory_budget_mb must be >= 0 (or None), not {memory_budget_mb!r}")
    evals = [
        Features.from_user(e, name="eval set", n_features=features.n_features, sparse=True)
        for e in eval_sets
    ]
    declared = host_declaration(*constraints, run.names, features.n_features)
    run.progress.enter(HostPhase.SETUP)
    ctl, grad, info = (run.session.channel(guest, n) for n in ("ctl", "grad", "info"))
    run.channels = (ctl, grad, info)
    run.n_features = features.n_features
    if resume and run.checkpoint is None:
        raise InputError("resume needs the checkpoint directory to resume from")
    digest = data_digest(features.matrix, *(e.matrix for e in evals), *declared.settings())
    saved = (
        HostCheckpoint.load(run.checkpoint, guest)
        if resume and run.checkpoint is not None
        else None
    )
    if saved is not None and saved.digest != digest:
        raise CheckpointError(
            "the host's checkpoint was written for other data (its rows, features, "
            "evaluation sets or declared constraints differ): resume with the data and "
            "constraints it was trained with, or start afresh"
        )
    run.X, run.evals, run.digest, run.saved = features, evals, digest, saved
    run.declared = declared


async def _handshake(run: _HostRun, dp_replay: bool) -> Setup:
    """Handshake: say what this host holds (rows, features, evaluation set sizes, and the run
    and chain of a checkpoint or the fingerprint of a model to continue), then read the
    guest's setup, which carries its public key (a host has no keys of its own) and refuse a
    version or a private mode this host did not agree to."""
    ctl, guest, saved = run.channels[0], run.guest, run.saved
    run_id, chain = (saved.run, saved.chain) if saved is not None else ("", [])
    evals_rows = [e.n_rows for e in run.evals]
    init = "" if run.init_model is None else run.init_model.fingerprint
    n_rows = run.X.n_rows
    declared = run.declared
    hello = Hello(
        VERSION,
        n_rows,
        run.n_features,
        evals_rows,
        run_id,
        chain,
        init,
        declared.directions,
        declared.groups,
    )
    await send(ctl, hello)
    setup = await recv(ctl, Setup)
    if setup.version != VERSION:
        raise reject(guest, "unsupported protocol version")
    if setup.tokens and setup.private:
        raise reject(guest, "asks for feature tokens in a private run")
    if setup.private == PRIVATE_ORDERED and not dp_replay:
        raise reject(
            guest,
            "asks for a private run with the candidates in order (a test noise seed), which "
            "shows it their order; this host allows that only with dp_replay=True",
        )
    return setup


async def _warm_start(run: _HostRun, setup: Setup) -> tuple[list[HostSplit], list[str]]:
    """Warm start and resume, as the guest decided: a continued model's splits (and this
    host's side of its margins, through the prediction protocol), or the splits of the trees
    a resumed run keeps; nothing on a fresh run. Returns the splits kept and the fingerprint
    chain so far."""
    guest, init_model, saved = run.guest, run.init_model, run.saved
    chain: list[str] = saved.chain if saved is not None else []
    kept: list[HostSplit] = []
    if setup.init:  # a warm start: the model's trees, and the chain over them
        if init_model is None or setup.init != init_model.fingerprint:
            raise reject(guest, "continues a model this host was not given")
        if any(s.tree >= setup.start for s in init_model.splits):
            raise reject(guest, "continues a model with fewer trees than this host's part")
        kept, chain = list(init_model.splits), setup.chain
        await host_warm(run.session, init_model, run.X, run.evals)
    elif setup.start:
        if saved is None or setup.run != saved.run or len(saved.chain) < setup.start:
            raise reject(guest, f"resumes at tree {setup.start} of a run this host does not hold")
        kept = [s for s in saved.model.splits if s.tree < setup.start]
        logger.info("resuming at tree %d of %d, as the guest asks", setup.start, len(saved.chain))
    return kept, chain


def _host(
    run: _HostRun,
    setup: Setup,
    kept: list[HostSplit],
    sparse: bool | str,
    memory_budget_mb: float | None,
    ledger: HostLedger,
) -> Host:
    """The host's tree protocol (:class:`~p2pboost.hetero.training.host_tree.Host`) over the
    rows binned with the guest's ``max_bin``, continuing from the ``kept`` splits."""
    ctl, grad, info = run.channels
    mapper = BinMapper(setup.max_bin).fit(run.X)
    return Host(
        guest=run.guest,
        ctl=ctl,
        grad=grad,
        info=info,
        public_key=setup.key,
        mapper=mapper,
        data=mapper.transform(run.X),
        evals=[mapper.transform(e) for e in run.evals],
        min_rows=0 if setup.private else setup.min_samples_leaf,
        min_child_weight=setup.min_child_weight,
        progress=run.progress,
        private=setup.private,
        tokens=run.declared.token if setup.tokens else None,
        sparse=sparse,
        hist_budget=None if memory_budget_mb is None else int(memory_budget_mb * 2**20),
        splits=kept,
        start=setup.start,
        on_tree=ledger.tree_done,
    )


async def _rounds(
    host: Host, setup: Setup, executor: AnyExecutor | None, workers: int | None
) -> str:
    """The round loop: the host answers the guest tree by tree until its done message, its
    shards pinned in the workers of a pool it owns for this call (or the caller's), and
    returns the fingerprint the guest announced."""
    async with owned_executor(
        executor, workers, pinned=True, prefer_threads=kernels.releases_gil()
    ) as (pinned, n_workers):
        assert isinstance(pinned, PinnedExecutor)
        host.shards = Shards(pinned)
        # Compression needs no pinning: the caller's executor when there is one.
        plain = executor if isinstance(executor, Executor) else pinned  # a Dask client: its pool
        host.engine = CryptoEngine(setup.key, executor=plain, workers=n_workers)
        return await host.serve()


async def _finish(run: _HostRun, host: Host, fingerprint: str) -> HostModel:
    """Finish: this host's part of the model, its splits in tree and node order."""
    run.progress.enter(HostPhase.DONE)
    splits = tuple(sorted(host.splits, key=lambda s: (s.tree, s.node)))
    return HostModel(fingerprint, run.guest, host.data.n_features, splits, run.names)
