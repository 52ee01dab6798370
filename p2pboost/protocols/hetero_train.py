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
a process pool; numpy steps run in threads; the event loop only moves messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import multiprocessing
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.compress import SplitInfoPackage, decompress_split_infos
from p2pboost.crypto.engine import PaillierEngine, default_workers
from p2pboost.crypto.histogram import EncryptedHistogram
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.crypto.paillier import (
    CiphertextBatch,
    PrivateKey,
    PublicKey,
    generate_keypair,
)
from p2pboost.exceptions import (
    CodecError,
    CryptoError,
    InputError,
    KeyMismatchError,
    RemoteProtocolError,
)
from p2pboost.gbdt.binning import BinMapper, BinnedData, check_matrix
from p2pboost.gbdt.booster import _refit
from p2pboost.gbdt.callbacks import Callback, CallbackEnv, EarlyStop
from p2pboost.gbdt.fixedpoint import Grid, choose_grid, from_fixed, quantize, to_fixed
from p2pboost.gbdt.grower import Frontier, LayerPlan, TreeGrower, partition_rows
from p2pboost.gbdt.histogram import make_builder
from p2pboost.gbdt.metrics import get_metric
from p2pboost.gbdt.objectives import Objective, get_objective
from p2pboost.gbdt.params import MAX_BIN_LIMIT, BoostParams, MultiStrategy
from p2pboost.gbdt.sampling import column_sample, goss_sample, row_sample
from p2pboost.gbdt.split import MIN_GAIN, LayerSplits, candidate_mask, leaf_weight, split_gains
from p2pboost.gbdt.tree import Tree
from p2pboost.model import GUEST, GuestModel, GuestTree, HostModel, HostSplit, add_tree, walk
from p2pboost.node import Channel, Session
from p2pboost.protocols._hetero_kernels import (
    Candidates,
    candidate_sums,
    child_histograms,
    chunk_histogram,
)
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = [
    "GuestPhase",
    "HeteroConfig",
    "HostPhase",
    "Progress",
    "guest_train",
    "host_train",
    "own_executor",
]

logger = logging.getLogger("p2pboost.hetero")

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
T = TypeVar("T")

_VERSION = 1
#: Largest row count a host may announce (bounds what a peer can make us allocate).
MAX_ROWS = 100_000_000
_MAX_FEATURES = 1_000_000


class GuestPhase(Enum):
    """Where the guest is, for logs, statistics and errors."""

    SETUP = "setup"
    ENCRYPT = "encrypt"
    SPLITS = "splits"
    DECIDE = "decide"
    PARTITION = "partition"
    EVALUATE = "evaluate"
    FINISH = "finish"
    DONE = "done"


class HostPhase(Enum):
    """Where a host is."""

    SETUP = "setup"
    ROOT = "root"
    LAYER = "layer"
    DECIDE = "decide"
    FINISH = "finish"
    DONE = "done"


@dataclass
class Progress:
    """Phase, tree and layer of a running party (read it from another task to monitor)."""

    phase: GuestPhase | HostPhase
    tree: int = -1
    depth: int = -1
    history: list[str] = field(default_factory=list)

    def enter(self, phase: GuestPhase | HostPhase, depth: int = -1) -> None:
        self.phase, self.depth = phase, depth
        logger.debug("tree %d depth %d: %s", self.tree, depth, phase.value)


@dataclass(frozen=True, slots=True)
class HeteroConfig:
    """Knobs of the protocol (not of the model: those are :class:`BoostParams`).

    ``key_bits`` below 2048 needs ``allow_insecure_key`` (1024 is for tests and comparisons).
    ``chunk_rows``: ciphertexts per streamed chunk. ``workers``: processes of the pool the
    protocol starts when no executor is given.
    """

    key_bits: int = 2048
    allow_insecure_key: bool = False
    chunk_rows: int = 2048
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.chunk_rows < 1:
            raise InputError("chunk_rows must be at least 1")
        if self.workers is not None and self.workers < 1:
            raise InputError("workers must be at least 1")


@contextlib.asynccontextmanager
async def own_executor(
    executor: Executor | None, workers: int | None
) -> AsyncIterator[tuple[Executor, int]]:
    """``executor`` as is, or a fresh ``spawn`` process pool shut down on exit."""
    if executor is not None:
        yield executor, workers or default_workers()
        return
    n = workers or default_workers()
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool, n
    finally:
        await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)


# -- message validation ------------------------------------------------------------------------


def _expect(msg: object, kind: str, peer: str) -> dict[str, Any]:
    if not isinstance(msg, dict) or msg.get("t") != kind:
        got = msg.get("t") if isinstance(msg, dict) else type(msg).__name__
        raise RemoteProtocolError(f"expected a {kind!r} message, got {got!r}", peer=peer)
    return msg


def _int(msg: dict[str, Any], key: str, peer: str, low: int, high: int) -> int:
    v = msg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise RemoteProtocolError(f"{key!r} must be an integer in [{low}, {high}]", peer=peer)
    return v


def _array(
    msg: dict[str, Any], key: str, peer: str, dtype: Any, shape: tuple[int, ...] | None
) -> npt.NDArray[Any]:
    v = msg.get(key)
    if not isinstance(v, np.ndarray) or v.dtype != np.dtype(dtype) or v.ndim != 1:
        raise RemoteProtocolError(f"{key!r} must be a 1-d {np.dtype(dtype)} array", peer=peer)
    if shape is not None and v.shape != shape:
        raise RemoteProtocolError(f"{key!r} must have shape {shape}", peer=peer)
    return v


def _list(msg: dict[str, Any], key: str, peer: str, length: int) -> list[Any]:
    v = msg.get(key)
    if not isinstance(v, list) or len(v) != length:
        raise RemoteProtocolError(f"{key!r} must be a list of {length} items", peer=peer)
    return v


def _bitmap(obj: object, n: int, peer: str) -> B8:
    """Unpack a ``np.packbits`` bitmap of exactly ``n`` bits (padding bits must be 0)."""
    nbytes = (n + 7) // 8
    if not isinstance(obj, np.ndarray) or obj.dtype != np.uint8 or obj.shape != (nbytes,):
        raise RemoteProtocolError(f"bitmap must be {nbytes} uint8 bytes for {n} rows", peer=peer)
    bits = np.unpackbits(obj)
    if bits[n:].any():
        raise RemoteProtocolError("bitmap has bits set beyond its rows", peer=peer)
    return bits[:n].astype(np.bool_)


def _grid_wire(g: Grid, h: Grid) -> list[int]:
    return [g.bits, g.magnitude_bits, h.bits, h.magnitude_bits]


def _spec(n_rows: int, grids: tuple[Grid, Grid], public_key: PublicKey) -> PackingSpec:
    return PackingSpec.for_grids(n_rows, grids[0], grids[1], key_bits=public_key.bits)


async def _off(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in the process pool."""
    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)


# -- guest -------------------------------------------------------------------------------------


@dataclass
class _EvalSet:
    name: str
    data: BinnedData
    y: F64
    margin: F64


@dataclass
class _HostLink:
    """The guest's view of one host."""

    name: str
    index: int  # 1-based owner number
    ctl: Channel
    grad: Channel
    info: Channel
    n_features: int


@dataclass
class _Package:
    """A decrypted split-info package: ids and exact left sums (floats on the grid)."""

    ids: npt.NDArray[np.uint64]
    counts: I64
    grad: F64  # (m, 1)
    hess: F64  # (m, 1)


@dataclass
class _Winner:
    """Best split of one node: ``owner`` 0 (guest) or host number; ``tied`` host ids."""

    owner: int
    gain: float
    tied: npt.NDArray[np.uint64] | None = None


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
    keys: tuple[PublicKey, PrivateKey] | None = None,
    progress: Progress | None = None,
) -> GuestModel:
    """Train as the guest (labels ``y``, features ``X``) with ``hosts`` (their party ids).

    ``eval_sets`` are ``(X_guest, y)`` pairs whose rows are aligned with the hosts'
    ``eval_sets``; ``callbacks`` (e.g. :class:`~p2pboost.gbdt.callbacks.EarlyStopping`) see
    each round's evaluation as in :func:`p2pboost.gbdt.booster.train`. ``keys`` reuses a key
    pair instead of generating one.
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
    evals = _guest_eval_sets(objective, mapper, eval_sets, eval_names)
    metrics = [get_metric(m) for m in (eval_metrics or [objective.default_metric])]

    links = [
        _HostLink(
            h,
            k,
            session.channel(h, "ctl"),
            session.channel(h, "grad"),
            session.channel(h, "info"),
            0,
        )
        for k, h in enumerate(hosts, start=1)
    ]
    hellos = await gather_or_cancel(*(link.ctl.recv() for link in links))
    for link, msg in zip(links, hellos, strict=True):
        hello = _expect(msg, "hello", link.name)
        if _int(hello, "version", link.name, 0, 1 << 16) != _VERSION:
            raise RemoteProtocolError("unsupported protocol version", peer=link.name)
        n = _int(hello, "n_rows", link.name, 1, MAX_ROWS)
        if n != data.n_rows:
            raise InputError(f"host {link.name!r} has {n} rows, the guest {data.n_rows}")
        link.n_features = _int(hello, "n_features", link.name, 1, _MAX_FEATURES)
        n_eval = _list(hello, "n_eval", link.name, len(evals))
        if [int(v) if isinstance(v, int) else -1 for v in n_eval] != [e.y.size for e in evals]:
            raise InputError(f"host {link.name!r} has other evaluation set sizes")

    if keys is None:
        keys = await asyncio.to_thread(
            generate_keypair, config.key_bits, allow_insecure=config.allow_insecure_key
        )
    public_key, private_key = keys
    setup = {
        "t": "setup",
        "version": _VERSION,
        "key": public_key,
        "max_bin": params.max_bin,
        "min_samples_leaf": params.min_samples_leaf,
    }
    await gather_or_cancel(*(link.ctl.send(setup) for link in links))

    base = (
        objective.init_margin(y_arr)
        if params.base_score is None
        else objective.margin_from_score(params.base_score)
    )
    k_out = objective.n_outputs
    for ev in evals:
        ev.margin = np.tile(base, (ev.y.size, 1))
    n_total = data.n_features + sum(link.n_features for link in links)
    async with own_executor(executor, config.workers) as (pool, _):
        engine = PaillierEngine(public_key, private_key, executor=pool)
        trainer = _GuestTrainer(
            params=params,
            objective=objective,
            config=config,
            pool=pool,
            engine=engine,
            links=links,
            mapper=mapper,
            data=data,
            y=y_arr,
            margin=np.tile(base, (data.n_rows, 1)),
            evals=evals,
            progress=progress,
        )
        rng = np.random.default_rng(params.seed)
        trees: list[GuestTree] = []
        outputs: list[int] = []
        best_iteration: int | None = None
        for it in range(params.n_estimators):
            grad, hess = objective.grad_hess(y_arr, trainer.margin)
            sample: I64 | None
            if params.goss:
                sample, scale = goss_sample(rng, grad, params.top_rate, params.other_rate)
                grad, hess = grad * scale[:, None], hess * scale[:, None]
            else:
                sample = row_sample(rng, data.n_rows, params.subsample)
            features = column_sample(rng, n_total, params.colsample_bytree)
            for out in [-1] if k_out == 1 else list(range(k_out)):
                g = grad if out < 0 else grad[:, out : out + 1]
                h = hess if out < 0 else hess[:, out : out + 1]
                tree = await trainer.grow(len(trees), g, h, sample, features, out)
                trees.append(tree)
                outputs.append(out)
            progress.enter(GuestPhase.EVALUATE)
            evaluation = {
                ev.name: {m.name: m(ev.y, _prediction(objective, ev.margin)) for m in metrics}
                for ev in evals
            }
            env = CallbackEnv(iteration=it, n_estimators=params.n_estimators, evaluation=evaluation)
            try:
                for cb in callbacks:
                    cb(env)
            except EarlyStop as stop:
                best_iteration = stop.best_iteration
                break

        progress.enter(GuestPhase.FINISH)
        fingerprint = _fingerprint(trees)
        done = {"t": "done", "fingerprint": fingerprint, "n_trees": len(trees)}
        await gather_or_cancel(*(link.ctl.send(done) for link in links))
        byes = await gather_or_cancel(*(link.ctl.recv() for link in links))
        for link, msg in zip(links, byes, strict=True):
            _expect(msg, "bye", link.name)
    progress.enter(GuestPhase.DONE)
    return GuestModel(
        fingerprint=fingerprint,
        params=params,
        hosts=tuple(hosts),
        mapper=mapper,
        base_margin=np.asarray(base, dtype=np.float64),
        trees=trees,
        tree_output=outputs,
        trees_per_round=k_out,
        best_iteration=best_iteration,
    )


def _fingerprint(trees: Sequence[GuestTree]) -> str:
    """Shared model id: a random nonce and the public shape of the trees."""
    h = hashlib.sha256(b"p2pboost/hetero/model/v1" + secrets.token_bytes(16))
    for tree in trees:
        for arr in (tree.owner, tree.left, tree.right):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    return h.hexdigest()[:32]


def _prediction(objective: Objective, margin: F64) -> F64:
    out = objective.transform(margin)
    return out[:, 0] if out.shape[1] == 1 else out


def _guest_eval_sets(
    objective: Objective,
    mapper: BinMapper,
    eval_sets: Sequence[tuple[Any, Any]],
    eval_names: Sequence[str] | None,
) -> list[_EvalSet]:
    names = list(eval_names) if eval_names is not None else []
    if eval_names is None:
        names = [f"valid_{i}" for i in range(len(eval_sets))]
    if len(names) != len(eval_sets) or len(set(names)) != len(names):
        raise InputError("eval_names must name each evaluation set once")
    out = []
    for name, (Xv, yv) in zip(names, eval_sets, strict=True):
        yv_arr = objective.check_labels(yv)
        arr = check_matrix(Xv, name=f"eval set {name!r}", n_features=mapper.n_features)
        if arr.shape[0] != yv_arr.size:
            raise InputError(f"eval set {name!r}: rows and labels differ in number")
        out.append(_EvalSet(name, mapper.transform(arr), yv_arr, np.empty((0, 0))))
    return out


@dataclass
class _GuestTrainer:
    """The guest's state across trees; :meth:`grow` runs the protocol for one tree."""

    params: BoostParams
    objective: Objective
    config: HeteroConfig
    pool: Executor
    engine: PaillierEngine
    links: list[_HostLink]
    mapper: BinMapper
    data: BinnedData
    y: F64
    margin: F64
    evals: list[_EvalSet]
    progress: Progress

    def __post_init__(self) -> None:
        p = self.params
        self.builder = make_builder(self.data, p.sparse_aware, with_counts=p.min_samples_leaf > 1)
        self.candidates = candidate_mask(self.mapper.n_bins, p.max_bin)
        offsets = np.cumsum([self.data.n_features] + [lk.n_features for lk in self.links])
        self.host_slices = [slice(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]

    async def grow(
        self, tree_id: int, g: F64, h: F64, sample: I64 | None, features: B8, out: int
    ) -> GuestTree:
        """Grow one tree with the hosts; update the training and evaluation margins."""
        self.progress.tree = tree_id
        rows = np.arange(self.data.n_rows) if sample is None else sample
        g_grid, h_grid = choose_grid(g[rows], rows.size), choose_grid(h[rows], rows.size)
        gq, hq = quantize(g, g_grid), quantize(h, h_grid)
        public_key = self.engine.public_key
        spec = _spec(int(rows.size), (g_grid, h_grid), public_key)
        mask = None
        if sample is not None:
            bits = np.zeros(self.data.n_rows, dtype=np.bool_)
            bits[sample] = True
            mask = np.packbits(bits)
        for link, sl in zip(self.links, self.host_slices, strict=True):
            await link.ctl.send(
                {
                    "t": "tree",
                    "tree": tree_id,
                    "grid": _grid_wire(g_grid, h_grid),
                    "sample": mask,
                    "features": features[sl].astype(np.uint8),
                }
            )
        grower = TreeGrower(
            self.data,
            self.builder,
            self.params,
            gq,
            hq,
            sample,
            self.candidates & features[: self.data.n_features, None, None],
            self.mapper.thresholds,
        )
        self.progress.enter(GuestPhase.ENCRYPT, 0)
        tree_ctx = _TreeRound(self, tree_id, grower, spec, (g_grid, h_grid))
        stream = asyncio.ensure_future(self._stream_gradients(spec, gq, hq, rows, g_grid, h_grid))
        try:
            frontier = await asyncio.to_thread(grower.root)
            await stream
        finally:
            if not stream.done():
                stream.cancel()
                await asyncio.gather(stream, return_exceptions=True)
        tree = await tree_ctx.run(frontier)
        positions = grower.positions
        if self.margin.shape[1] == 1:
            tree = _refit_guest(self.objective, tree, self.y, self.margin, positions, sample, self.params)
        add_tree(self.margin, tree.value[positions], out)
        for i, ev in enumerate(self.evals):
            go_left = tree.guest_decisions_binned(ev.data.codes, ev.data.missing_bin)
            for node, bits in tree_ctx.eval_bits.items():
                go_left[node] = bits[i]
            leaves = walk(tree.left, tree.right, tree.internal, go_left, tree.depth)
            add_tree(ev.margin, tree.value[leaves], out)
        return tree

    async def _stream_gradients(
        self, spec: PackingSpec, gq: F64, hq: F64, rows: I64, g_grid: Grid, h_grid: Grid
    ) -> None:
        """Pack, encrypt chunk by chunk in the pool, and send each chunk to every host."""
        gi = to_fixed(gq[rows, 0], g_grid)
        hi = to_fixed(hq[rows, 0], h_grid)
        step = self.config.chunk_rows
        starts = list(range(0, rows.size, step))

        async def encrypt(start: int) -> list[Any]:
            sl = slice(start, start + step)
            planes = await _off(self.pool, pack, spec, gi[sl], hi[sl])
            return await self.engine.encrypt_batch(planes[0])

        # At most two chunks ahead: the pool stays busy, memory stays bounded.
        pending: list[asyncio.Future[list[Any]]] = []
        try:
            for i, start in enumerate(starts):
                while len(pending) < 2 and i + len(pending) < len(starts):
                    pending.append(asyncio.ensure_future(encrypt(starts[i + len(pending)])))
                cts = await pending.pop(0)
                batch = CiphertextBatch.from_ciphertexts(self.engine.public_key, cts)
                msg = {"t": "chunk", "start": start, "ct": batch}
                await gather_or_cancel(*(link.grad.send(msg) for link in self.links))
        finally:
            for fut in pending:
                fut.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


def _refit_guest(
    objective: Objective,
    tree: GuestTree,
    y: F64,
    margin: F64,
    positions: I64,
    sample: I64 | None,
    params: BoostParams,
) -> GuestTree:
    """The core's leaf refit (L1: median residual) on the guest's view of the tree."""
    core = Tree(
        feature=np.where(tree.internal, 0, -1).astype(np.int64),
        threshold_bin=tree.threshold_bin,
        threshold=tree.threshold,
        default_left=tree.default_left,
        left=tree.left,
        right=tree.right,
        value=tree.value,
        gain=tree.gain,
        cover=tree.cover,
        depth=tree.depth,
    )
    refit = _refit(objective, core, y, margin, positions, sample, params.learning_rate)
    return tree if refit is core else replace(tree, value=refit.value)


class _TreeRound:
    """One tree's layers on the guest side."""

    def __init__(
        self,
        trainer: _GuestTrainer,
        tree_id: int,
        grower: TreeGrower,
        spec: PackingSpec,
        grids: tuple[Grid, Grid],
    ) -> None:
        self.t = trainer
        self.tree_id = tree_id
        self.grower = grower
        self.spec = spec
        self.grids = grids
        self.owner: list[int] = [-1]
        #: Host split node -> validation-set bits (one bool array per evaluation set).
        self.eval_bits: dict[int, list[B8]] = {}

    async def run(self, frontier: Frontier) -> GuestTree:
        params, progress = self.t.params, self.t.progress
        while True:
            progress.enter(GuestPhase.SPLITS, frontier.depth)
            own, packages = await gather_or_cancel(
                asyncio.to_thread(self.grower.find_splits, frontier),
                self._receive_layer(frontier),
            )
            winners = self._choose(frontier, own, packages)
            progress.enter(GuestPhase.DECIDE, frontier.depth)
            accept = [
                i
                for i, w in enumerate(winners)
                if w.gain > max(params.gamma, MIN_GAIN)  # the core's acceptance rule
            ]
            chosen = await self._decide(frontier, winners, accept)
            progress.enter(GuestPhase.PARTITION, frontier.depth)
            grow = bool(accept) and frontier.depth + 1 < params.max_depth
            plan = self._apply(frontier, own, winners, accept, chosen, packages)
            await self._partition(plan, winners, accept, chosen, grow)
            if not grow:
                break
            frontier = await asyncio.to_thread(self.grower.child_histograms, frontier, plan)
        core = self.grower.finish()
        owner = np.full(core.n_nodes, -1, dtype=np.int64)
        owner[: len(self.owner)] = self.owner
        host_node = owner > GUEST
        return GuestTree(
            owner=owner,
            feature=np.where(owner == GUEST, core.feature, -1),
            threshold_bin=np.where(owner == GUEST, core.threshold_bin, -1),
            threshold=np.where(owner == GUEST, core.threshold, np.nan),
            default_left=np.where(owner == GUEST, core.default_left, False),
            left=core.left,
            right=core.right,
            value=core.value,
            gain=np.where(host_node | (owner == GUEST), core.gain, 0.0),
            cover=core.cover,
            depth=core.depth,
        )

    # -- receiving and scoring host candidates ----------------------------------------------

    async def _receive_layer(self, frontier: Frontier) -> dict[tuple[int, int], _Package]:
        """Every host's package for every frontier node, decrypted as each arrives."""
        parts = await gather_or_cancel(
            *(self._receive_host(link, frontier) for link in self.t.links)
        )
        return {k: v for part in parts for k, v in part.items()}

    async def _receive_host(
        self, link: _HostLink, frontier: Frontier
    ) -> dict[tuple[int, int], _Package]:
        expected = {int(n): i for i, n in enumerate(frontier.nodes.tolist())}
        decrypting: dict[int, asyncio.Future[_Package]] = {}
        try:
            for _ in range(len(expected)):
                msg = _expect(await link.info.recv(), "pkg", link.name)
                if _int(msg, "tree", link.name, 0, 1 << 40) != self.tree_id:
                    raise RemoteProtocolError("package for another tree", peer=link.name)
                node = _int(msg, "node", link.name, 0, 1 << 40)
                if node not in expected or node in decrypting:
                    raise RemoteProtocolError(f"unexpected package for node {node}", peer=link.name)
                try:
                    pkg = SplitInfoPackage.from_wire(msg.get("pkg"), self.t.engine.public_key, self.spec)
                except (CodecError, KeyMismatchError) as exc:
                    raise RemoteProtocolError(f"bad split-info package: {exc}", peer=link.name) from None
                node_count = int(frontier.count[expected[node]])
                if pkg.counts.size and pkg.counts.max() > node_count:
                    raise RemoteProtocolError("split-info count above the node's rows", peer=link.name)
                decrypting[node] = asyncio.ensure_future(self._open(link.name, pkg))
            results = await gather_or_cancel(*decrypting.values())
        finally:
            for fut in decrypting.values():
                fut.cancel()
            await asyncio.gather(*decrypting.values(), return_exceptions=True)
        return {(link.index, n): r for n, r in zip(decrypting, results, strict=True)}

    async def _open(self, peer: str, pkg: SplitInfoPackage) -> _Package:
        plain = await self.t.engine.decrypt_batch(pkg.ciphertexts)
        try:
            g_int, h_int = await _off(self.t.pool, decompress_split_infos, self.spec, plain, pkg.counts)
        except CryptoError as exc:
            raise RemoteProtocolError(f"split-info sums do not decode: {exc}", peer=peer) from None
        g_grid, h_grid = self.grids
        return _Package(
            pkg.ids,
            pkg.counts,
            from_fixed(np.asarray(g_int, dtype=np.int64), g_grid),
            from_fixed(np.asarray(h_int, dtype=np.int64), h_grid),
        )

    def _choose(
        self, frontier: Frontier, own: LayerSplits, packages: dict[tuple[int, int], _Package]
    ) -> list[_Winner]:
        """Per node, the core's choice between the guest's best and each host's candidates."""
        p = self.t.params
        winners = []
        for i, node in enumerate(frontier.nodes.tolist()):
            best = _Winner(GUEST, float(own.gain[i]))
            G, H = frontier.grad[i : i + 1], frontier.hess[i : i + 1]
            for link in self.t.links:
                pkg = packages[(link.index, node)]
                if len(pkg.ids) == 0:
                    continue
                gains = split_gains(pkg.grad, pkg.hess, G, H, p.reg_lambda)
                # The core's validity rules (min_child_weight; min_samples_leaf on counts).
                valid = (pkg.hess[:, 0] >= p.min_child_weight) & (
                    H[0, 0] - pkg.hess[:, 0] >= p.min_child_weight
                )
                if p.min_samples_leaf > 1:
                    n = int(frontier.count[i])
                    valid &= (pkg.counts >= p.min_samples_leaf) & (
                        n - pkg.counts >= p.min_samples_leaf
                    )
                gains = np.where(valid, gains, -np.inf)
                top = float(gains.max())
                # Strictly greater: on equal gains the earlier party (lower feature index) wins.
                if top > best.gain or (np.isnan(best.gain) and not np.isnan(top)):
                    best = _Winner(link.index, top, pkg.ids[gains == top])
            winners.append(best)
        return winners

    async def _decide(
        self, frontier: Frontier, winners: list[_Winner], accept: list[int]
    ) -> dict[int, tuple[int, B8]]:
        """Ask each owner to resolve its winning ids: node -> (chosen id, left bitmap)."""
        by_host: dict[int, list[int]] = {}
        for i in accept:
            if winners[i].owner != GUEST:
                by_host.setdefault(winners[i].owner, []).append(i)
        counts = np.bincount(self.grower.positions, minlength=self.grower.tree.n_nodes)

        async def ask(link: _HostLink, idx: list[int]) -> dict[int, tuple[int, B8]]:
            nodes = frontier.nodes[idx].astype(np.int64)
            ids = [winners[i].tied for i in idx]
            await link.ctl.send({"t": "decide", "nodes": nodes, "ids": ids})
            reply = _expect(await link.ctl.recv(), "decided", link.name)
            chosen = _array(reply, "ids", link.name, np.uint64, (len(idx),))
            bitmaps = _list(reply, "bitmaps", link.name, len(idx))
            evals = _list(reply, "eval", link.name, len(idx))
            out = {}
            for j, i in enumerate(idx):
                tied = winners[i].tied
                assert tied is not None
                if chosen[j] not in tied:
                    raise RemoteProtocolError("chose an id that was not offered", peer=link.name)
                node = int(nodes[j])
                out[node] = (int(chosen[j]), _bitmap(bitmaps[j], int(counts[node]), link.name))
                ev = evals[j]
                if not isinstance(ev, list) or len(ev) != len(self.t.evals):
                    raise RemoteProtocolError("evaluation bits per set expected", peer=link.name)
                self.eval_bits[node] = [
                    _bitmap(b, e.y.size, link.name) for b, e in zip(ev, self.t.evals, strict=True)
                ]
            return out

        asks = [ask(self.t.links[k - 1], idx) for k, idx in sorted(by_host.items())]
        parts = await gather_or_cancel(*asks)
        return {k: v for part in parts for k, v in part.items()}

    def _apply(
        self,
        frontier: Frontier,
        own: LayerSplits,
        winners: list[_Winner],
        accept: list[int],
        chosen: dict[int, tuple[int, B8]],
        packages: dict[tuple[int, int], _Package],
    ) -> LayerPlan:
        """Create the children of accepted splits, exactly as the core's ``apply_splits``."""
        p, tree = self.t.params, self.grower.tree
        acc = np.asarray(accept, dtype=np.int64)
        k = acc.size
        lg, lh = np.empty((k, 1)), np.empty((k, 1))
        feature = np.full(k, -1, dtype=np.int64)
        threshold_bin = np.full(k, -1, dtype=np.int64)
        default_left = np.zeros(k, dtype=np.bool_)
        for j, i in enumerate(accept):
            w = winners[i]
            if w.owner == GUEST:
                lg[j], lh[j] = own.left_grad[i], own.left_hess[i]
                feature[j], threshold_bin[j] = own.feature[i], own.threshold[i]
                default_left[j] = own.default_left[i]
            else:
                node = int(frontier.nodes[i])
                pkg = packages[(w.owner, node)]
                pos = int(np.flatnonzero(pkg.ids == np.uint64(chosen[node][0]))[0])
                lg[j], lh[j] = pkg.grad[pos], pkg.hess[pos]
        rg, rh = frontier.grad[acc] - lg, frontier.hess[acc] - lh
        both_g, both_h = _interleave(lg, rg), _interleave(lh, rh)
        w8 = leaf_weight(both_g, both_h, p.reg_lambda, p.min_child_weight)
        children = tree.add_nodes(p.learning_rate * w8, both_h.sum(axis=1))
        self.owner.extend([-1] * children.size)
        left, right = children[0::2], children[1::2]
        if k:
            tree.depth = max(tree.depth, frontier.depth + 1)
        is_guest = feature >= 0
        thresholds = np.full(k, np.nan)
        if is_guest.any():
            thresholds[is_guest] = self.t.mapper.thresholds(
                feature[is_guest], threshold_bin[is_guest]
            )
        nodes = frontier.nodes[acc]
        gains = np.array([winners[i].gain for i in accept], dtype=np.float64)
        tree.set_splits(nodes, feature, threshold_bin, thresholds, default_left, gains, left, right)
        for j, i in enumerate(accept):
            self.owner[int(nodes[j])] = winners[i].owner
        return LayerPlan(
            nodes=nodes,
            parent_index=acc,
            feature=feature,
            threshold_bin=threshold_bin,
            default_left=default_left,
            left=left,
            right=right,
            left_grad=lg,
            left_hess=lh,
            right_grad=rg,
            right_hess=rh,
        )

    async def _partition(
        self,
        plan: LayerPlan,
        winners: list[_Winner],
        accept: list[int],
        chosen: dict[int, tuple[int, B8]],
        grow: bool,
    ) -> None:
        """New positions from the guest's own splits and the owners' bitmaps; tell the hosts."""
        grower = self.grower
        old = grower.positions
        guest = np.array([winners[i].owner == GUEST for i in accept], dtype=np.bool_)
        moved = await asyncio.to_thread(
            partition_rows,
            self.t.data,
            old,
            plan.nodes[guest],
            plan.feature[guest],
            plan.threshold_bin[guest],
            plan.default_left[guest],
            plan.left[guest],
            plan.right[guest],
            grower.tree.n_nodes,
        )
        new = moved.copy()
        bitmaps = []
        for j, node in enumerate(plan.nodes.tolist()):
            rows = np.flatnonzero(old == node)
            if guest[j]:
                go_left = moved[rows] == plan.left[j]
            else:
                go_left = chosen[node][1]
                new[rows] = np.where(go_left, plan.left[j], plan.right[j])
            bitmaps.append(np.packbits(go_left))
        grower.positions = new
        msg = {
            "t": "layer",
            "nodes": plan.nodes.astype(np.int64),
            "left": plan.left.astype(np.int64),
            "right": plan.right.astype(np.int64),
            "bitmaps": bitmaps,
            "grow": grow,
        }
        await gather_or_cancel(*(link.ctl.send(msg) for link in self.t.links))


def _interleave(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    out = np.empty((a.shape[0] * 2, *a.shape[1:]), dtype=np.result_type(a, b))
    out[0::2] = a
    out[1::2] = b
    return out


# -- host --------------------------------------------------------------------------------------


async def host_train(
    session: Session,
    guest: str,
    X: Any,
    *,
    eval_sets: Sequence[Any] = (),
    executor: Executor | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> HostModel:
    """Train as a host with features ``X`` (rows aligned with the guest's).

    ``eval_sets`` are this host's features of the guest's evaluation sets (aligned rows).
    Returns this host's model part: its own splits only.
    """
    X_arr = check_matrix(X)
    evals = [check_matrix(e, name="eval set", n_features=X_arr.shape[1]) for e in eval_sets]
    progress = progress or Progress(HostPhase.SETUP)
    progress.enter(HostPhase.SETUP)
    ctl, grad, info = (session.channel(guest, n) for n in ("ctl", "grad", "info"))
    await ctl.send(
        {
            "t": "hello",
            "version": _VERSION,
            "n_rows": int(X_arr.shape[0]),
            "n_features": int(X_arr.shape[1]),
            "n_eval": [int(e.shape[0]) for e in evals],
        }
    )
    setup = _expect(await ctl.recv(), "setup", guest)
    if _int(setup, "version", guest, 0, 1 << 16) != _VERSION:
        raise RemoteProtocolError("unsupported protocol version", peer=guest)
    public_key = setup.get("key")
    if not isinstance(public_key, PublicKey):
        raise RemoteProtocolError("setup carries no public key", peer=guest)
    max_bin = _int(setup, "max_bin", guest, 2, MAX_BIN_LIMIT)
    min_rows = _int(setup, "min_samples_leaf", guest, 1, MAX_ROWS)
    mapper = BinMapper(max_bin).fit(X_arr)
    host = _Host(
        guest=guest,
        ctl=ctl,
        grad=grad,
        info=info,
        public_key=public_key,
        mapper=mapper,
        data=mapper.transform(X_arr),
        evals=[mapper.transform(e) for e in evals],
        min_rows=min_rows,
        progress=progress,
    )
    async with own_executor(executor, workers) as (pool, n_workers):
        host.pool = pool
        host.engine = PaillierEngine(public_key, executor=pool)
        host.groups = np.array_split(np.arange(host.data.n_features), min(n_workers, host.data.n_features))
        fingerprint = await host.serve()
    progress.enter(HostPhase.DONE)
    splits = tuple(sorted(host.splits, key=lambda s: (s.tree, s.node)))
    return HostModel(fingerprint, guest, host.data.n_features, splits)


@dataclass
class _Host:
    """A host's state across trees; :meth:`serve` answers the guest until "done"."""

    guest: str
    ctl: Channel
    grad: Channel
    info: Channel
    public_key: PublicKey
    mapper: BinMapper
    data: BinnedData
    evals: list[BinnedData]
    min_rows: int
    progress: Progress
    pool: Executor = field(init=False)
    engine: PaillierEngine = field(init=False)
    groups: list[I64] = field(init=False)
    splits: list[HostSplit] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows_major = np.ascontiguousarray(self.data.codes.T)  # (rows, features)
        self.allowed = candidate_mask(self.mapper.n_bins, self.mapper.max_bin)

    async def serve(self) -> str:
        n_trees = 0
        while True:
            msg = await self.ctl.recv()
            kind = msg.get("t") if isinstance(msg, dict) else None
            if kind == "done":
                done = _expect(msg, "done", self.guest)
                fp = done.get("fingerprint")
                if not isinstance(fp, str) or not 1 <= len(fp) <= 128:
                    raise RemoteProtocolError("bad model fingerprint", peer=self.guest)
                if _int(done, "n_trees", self.guest, 0, 1 << 40) != n_trees:
                    raise RemoteProtocolError("tree count differs from the trees grown", peer=self.guest)
                self.progress.enter(HostPhase.FINISH)
                await self.ctl.send({"t": "bye"})
                return fp
            tree_msg = _expect(msg, "tree", self.guest)
            if _int(tree_msg, "tree", self.guest, 0, 1 << 40) != n_trees:
                raise RemoteProtocolError("trees out of order", peer=self.guest)
            self.progress.tree = n_trees
            await _HostTree(self, n_trees, tree_msg).run()
            n_trees += 1


class _HostTree:
    """One tree on the host side."""

    def __init__(self, host: _Host, tree_id: int, msg: dict[str, Any]) -> None:
        self.h = host
        self.tree_id = tree_id
        peer, n = host.guest, host.data.n_rows
        grid = msg.get("grid")
        if not (isinstance(grid, list) and len(grid) == 4 and all(type(v) is int for v in grid)):
            raise RemoteProtocolError("grid must be four integers", peer=peer)
        if msg.get("sample") is None:
            self.sample = np.arange(n, dtype=np.int64)
        else:
            self.sample = np.flatnonzero(_bitmap(msg["sample"], n, peer)).astype(np.int64)
            if self.sample.size == 0:
                raise RemoteProtocolError("empty row sample", peer=peer)
        features = _array(msg, "features", peer, np.uint8, (host.data.n_features,))
        if features.max(initial=0) > 1:
            raise RemoteProtocolError("feature mask must hold 0 or 1", peer=peer)
        self.allowed = host.allowed & features.astype(np.bool_)[:, None, None]
        m = int(self.sample.size)
        try:
            grids = (Grid(grid[0], grid[1], m), Grid(grid[2], grid[3], m))
            if any(not -1100 <= v <= 1100 for v in grid) or any(gr.value_bits > 62 for gr in grids):
                raise InputError("grid exponents out of range")
            self.spec = _spec(m, grids, host.public_key)
        except InputError as exc:
            raise RemoteProtocolError(f"bad gradient grid: {exc}", peer=peer) from None
        if self.spec.plaintexts_per_row != 1:
            raise RemoteProtocolError("packed gradients must fit one plaintext", peer=peer)
        self.slot_of_row = np.full(n, -1, dtype=np.int64)
        self.slot_of_row[self.sample] = np.arange(m)
        self.cts: list[Any] = []
        self.positions = np.zeros(n, dtype=np.int64)
        self.n_nodes = 1
        self.frontier = [0]
        self.hists: dict[int, list[EncryptedHistogram]] = {}
        self.lookups: dict[int, dict[int, tuple[int, int, bool]]] = {}

    async def run(self) -> None:
        h = self.h
        h.progress.enter(HostPhase.ROOT, 0)
        self.hists[0] = await self._root()
        await self._send_package(0)
        depth = 0
        while True:
            msg = await h.ctl.recv()
            if isinstance(msg, dict) and msg.get("t") == "decide":
                h.progress.enter(HostPhase.DECIDE, depth)
                await self._decide(msg)
                msg = await h.ctl.recv()
            layer = _expect(msg, "layer", h.guest)
            grow = self._repartition(layer)
            depth += 1
            if not grow:
                return
            h.progress.enter(HostPhase.LAYER, depth)
            await self._layer(layer)

    async def _root(self) -> list[EncryptedHistogram]:
        """Accumulate the root histogram chunk by chunk, as chunks arrive."""
        h, peer = self.h, self.h.guest
        m = int(self.sample.size)
        acc: list[EncryptedHistogram | None] = [None] * len(h.groups)
        pending: list[asyncio.Future[list[EncryptedHistogram]]] = []

        async def chunk_task(codes: npt.NDArray[Any], cts: list[Any]) -> list[EncryptedHistogram]:
            return await gather_or_cancel(
                *(
                    _off(h.pool, chunk_histogram, h.public_key, codes[:, g], h.data.n_slots, cts)
                    for g in h.groups
                )
            )

        try:
            while len(self.cts) < m:
                msg = _expect(await h.grad.recv(), "chunk", peer)
                start = _int(msg, "start", peer, 0, m)
                batch = msg.get("ct")
                if start != len(self.cts) or not isinstance(batch, CiphertextBatch):
                    raise RemoteProtocolError("gradient chunks out of order or malformed", peer=peer)
                if not 0 < len(batch) <= m - start:
                    raise RemoteProtocolError("gradient chunk of a wrong size", peer=peer)
                try:
                    cts = batch.ciphertexts(h.public_key)
                except (CodecError, KeyMismatchError) as exc:
                    raise RemoteProtocolError(f"bad gradient ciphertexts: {exc}", peer=peer) from None
                self.cts.extend(cts)
                rows = self.sample[start : start + len(cts)]
                pending.append(asyncio.ensure_future(chunk_task(h.rows_major[rows], cts)))
                while pending and pending[0].done():
                    await self._merge(acc, pending.pop(0))
            while pending:
                await self._merge(acc, pending.pop(0))
        finally:
            for fut in pending:
                fut.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        assert all(a is not None for a in acc)
        return [a for a in acc if a is not None]

    @staticmethod
    async def _merge(
        acc: list[EncryptedHistogram | None], fut: asyncio.Future[list[EncryptedHistogram]]
    ) -> None:
        parts = await fut
        for g, part in enumerate(parts):
            cur = acc[g]
            acc[g] = part if cur is None else await asyncio.to_thread(cur.merge, part)

    async def _send_package(self, node: int) -> None:
        """Candidates of ``node`` over all groups -> shuffled, ids, compressed -> the guest."""
        h = self.h
        parts: list[Candidates] = await gather_or_cancel(
            *(
                _off(h.pool, candidate_sums, hist, self.allowed[g], h.min_rows)
                for hist, g in zip(self.hists[node], h.groups, strict=True)
            )
        )
        feats = np.concatenate([g[p.feature] for p, g in zip(parts, h.groups, strict=True)])
        bins = np.concatenate([p.bin for p in parts])
        dls = np.concatenate([p.default_left for p in parts])
        counts = np.concatenate([p.counts for p in parts])
        sums = [s for p in parts for s in p.sums]
        order = list(range(len(sums)))
        secrets.SystemRandom().shuffle(order)
        ids: set[int] = set()
        while len(ids) < len(order):
            ids.add(secrets.randbits(63))
        id_list = list(ids)
        secrets.SystemRandom().shuffle(id_list)
        compressed = await h.engine.compress_batch(self.spec, [[sums[i]] for i in order])
        self.lookups[node] = {
            id_: (int(feats[i]), int(bins[i]), bool(dls[i]))
            for id_, i in zip(id_list, order, strict=True)
        }
        pkg = SplitInfoPackage(
            compressed,
            np.array(id_list, dtype=np.uint64),
            counts[order].astype(np.int64) if order else np.empty(0, np.int64),
        )
        await h.info.send(
            {"t": "pkg", "tree": self.tree_id, "node": node, "pkg": pkg.to_wire(h.public_key)}
        )

    async def _decide(self, msg: dict[str, Any]) -> None:
        """Resolve the guest's winning ids: the lowest (feature, bin, direction) among ties."""
        h, peer = self.h, self.h.guest
        nodes = _array(msg, "nodes", peer, np.int64, None)
        tied = _list(msg, "ids", peer, nodes.size)
        if np.unique(nodes).size != nodes.size:
            raise RemoteProtocolError("node decided twice", peer=peer)
        chosen, bitmaps, evals = [], [], []
        for node, ids in zip(nodes.tolist(), tied, strict=True):
            lookup = self.lookups.get(node)
            if lookup is None or node not in self.frontier:
                raise RemoteProtocolError(f"node {node} is not being split", peer=peer)
            if not isinstance(ids, np.ndarray) or ids.dtype != np.uint64 or ids.ndim != 1:
                raise RemoteProtocolError("ids must be a uint64 array", peer=peer)
            if ids.size == 0 or any(int(i) not in lookup for i in ids.tolist()):
                raise RemoteProtocolError(f"unknown split id for node {node}", peer=peer)
            best = min(ids.tolist(), key=lambda i: _order(lookup[int(i)]))
            f, b, dl = lookup[int(best)]
            rows = np.flatnonzero(self.positions == node)
            chosen.append(best)
            bitmaps.append(np.packbits(_go_left(h.data.codes[f, rows], b, dl, h.data.missing_bin)))
            evals.append(
                [np.packbits(_go_left(e.codes[f], b, dl, e.missing_bin)) for e in h.evals]
            )
            h.splits.append(HostSplit(self.tree_id, node, f, b, h.mapper.threshold(f, b), dl))
        await h.ctl.send(
            {
                "t": "decided",
                "ids": np.array(chosen, dtype=np.uint64),
                "bitmaps": bitmaps,
                "eval": evals,
            }
        )

    def _repartition(self, msg: dict[str, Any]) -> bool:
        """Apply the guest's left-set bitmaps; returns whether the tree grows another layer."""
        peer = self.h.guest
        nodes = _array(msg, "nodes", peer, np.int64, None)
        k = nodes.size
        left = _array(msg, "left", peer, np.int64, (k,))
        right = _array(msg, "right", peer, np.int64, (k,))
        bitmaps = _list(msg, "bitmaps", peer, k)
        grow = msg.get("grow")
        if not isinstance(grow, bool):
            raise RemoteProtocolError("'grow' must be a boolean", peer=peer)
        fresh = self.n_nodes + 2 * np.arange(k)
        if (
            np.unique(nodes).size != k
            or not set(nodes.tolist()) <= set(self.frontier)
            or not np.array_equal(left, fresh)
            or not np.array_equal(right, fresh + 1)
        ):
            raise RemoteProtocolError("layer splits unknown nodes or numbers children oddly", peer=peer)
        new = self.positions.copy()
        for j, node in enumerate(nodes.tolist()):
            rows = np.flatnonzero(self.positions == node)
            go_left = _bitmap(bitmaps[j], rows.size, peer)
            new[rows] = np.where(go_left, left[j], right[j])
        self.positions = new
        self.n_nodes += 2 * k
        self.layer_nodes, self.layer_left, self.layer_right = nodes, left, right
        self.frontier = [c for pair in zip(left.tolist(), right.tolist()) for c in pair]
        for node in nodes.tolist():
            self.lookups.pop(node, None)
        if grow and k == 0:
            raise RemoteProtocolError("asked to grow a layer without splits", peer=peer)
        return grow

    async def _layer(self, msg: dict[str, Any]) -> None:
        """Children histograms (smaller built, sibling subtracted), packages sent when ready."""
        h = self.h
        sample_pos = self.positions[self.sample]
        counts = np.bincount(sample_pos, minlength=self.n_nodes)

        async def pair(node: int, left: int, right: int) -> None:
            small, big = (left, right) if counts[left] <= counts[right] else (right, left)
            rows = self.sample[sample_pos == small]
            cts = [self.cts[i] for i in self.slot_of_row[rows].tolist()]
            codes = h.rows_major[rows]
            parent = self.hists.pop(node)
            results = await gather_or_cancel(
                *(
                    _off(h.pool, child_histograms, par, codes[:, g], cts)
                    for par, g in zip(parent, h.groups, strict=True)
                )
            )
            self.hists[small] = [r[0] for r in results]
            self.hists[big] = [r[1] for r in results]
            await gather_or_cancel(self._send_package(left), self._send_package(right))

        await gather_or_cancel(
            *(
                pair(n, lf, rt)
                for n, lf, rt in zip(
                    self.layer_nodes.tolist(),
                    self.layer_left.tolist(),
                    self.layer_right.tolist(),
                    strict=True,
                )
            )
        )


def _order(entry: tuple[int, int, bool]) -> tuple[int, int, int]:
    """The core's candidate order: feature, bin, then missing-left before missing-right."""
    f, b, dl = entry
    return (f, b, 0 if dl else 1)


def _go_left(codes: npt.NDArray[Any], bin_: int, default_left: bool, missing_bin: int) -> B8:
    return np.asarray((codes <= bin_) | ((codes == missing_bin) & default_left))
