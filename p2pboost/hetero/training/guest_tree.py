"""The guest's side of one tree: encrypt and stream gradients, score, decide, partition.

:class:`GuestTrainer` grows each tree with the plaintext core's
:class:`~p2pboost.gbdt.grower.TreeGrower` and its schedule
(:meth:`~p2pboost.gbdt.grower.HistogramGrower.schedule`), answering three of its steps with
the hosts' help:

* **choose splits** (the core's split-choice hook): the guest's own best split per node
  (the core's :meth:`~p2pboost.gbdt.grower.HistogramGrower.find_splits`) competes with every
  host's candidates, decrypted as their packages arrive and scored with the core's
  :func:`~p2pboost.gbdt.split.split_gains` and validity rules under the core's tie-break;
  the owners of winning host candidates resolve ties and return the left sets;
* **partition**: the guest's own splits move its rows (the core's ``partition``), host
  splits move them by the owners' bitmaps, and every host is told the layer;
* **child histograms**: the guest's own, by the core (the hosts build theirs).

Children, leaf weights and tree arrays are the core's own ``apply_splits``; the tree that
comes out is a core :class:`~p2pboost.gbdt.tree.Tree` with an owner per split. The
protocol and its messages are described in :mod:`p2pboost.hetero.training.guest`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.packing import PackingSpec
from p2pboost.exceptions import CodecError, CryptoError, InputError
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import Grid, to_fixed
from p2pboost.gbdt.grower import (
    ChooseSplits,
    DepthMask,
    Frontier,
    GrowStep,
    LayerPlan,
    NodeColumns,
    Partition,
    TreeGrower,
    drive_async,
)
from p2pboost.gbdt.histogram import make_builder
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import PrivateTree
from p2pboost.gbdt.rounds import EvalData, TreeTask
from p2pboost.gbdt.split import LayerSplits, accepted, candidate_mask, split_gains
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero._messages import Chunk, Decide, Decided, Derived, Layer, Package, TreeStart
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.model import GUEST
from p2pboost.hetero.training.common import (
    B8,
    F64,
    I64,
    GuestPhase,
    Progress,
    chunk_bounds,
    grid_wire,
    packing_spec,
    unpack_bitmap,
)
from p2pboost.hetero.training.packages import OpenPackage, check_package, derive, open_package
from p2pboost.hetero.training.private import HostCandidates, choose_private
from p2pboost.net.node import Channel
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = [
    "GrownTree",
    "GuestTrainer",
    "HostLink",
]

#: Encryption tasks the guest keeps in flight per worker while it streams a tree's gradients.
_PIECES_AHEAD = 4


@dataclass
class HostLink:
    """The guest's view of one host."""

    name: str
    index: int  # 1-based owner number
    ctl: Channel
    grad: Channel
    info: Channel
    n_features: int


@dataclass
class _Winner:
    """Best split of one node: ``owner`` 0 (guest) or host number; ``tied`` host ids."""

    owner: int
    gain: float
    tied: npt.NDArray[np.uint64] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class GrownTree:
    """One tree the guest grew: leaves of the training rows and of every evaluation set."""

    tree: Tree
    positions: I64
    eval_leaves: list[I64]


@dataclass
class GuestTrainer:
    """The guest's state across trees; :meth:`grow` runs the protocol for one tree.

    ``workers`` is how many tasks the pool runs at once (chunks kept in flight). Between
    trees the engine's stash of randomisers is filled while the pool idles (``config.precompute``)
    by a background task; the trainer is an async context that owns that task, so it never
    outlives the ``async with`` block that grows the trees: leaving the block (training ended
    or failed) stops it and waits for it, and :meth:`grow` outside the block is refused.
    """

    params: BoostParams
    config: HeteroConfig
    engine: CryptoEngine
    workers: int
    links: list[HostLink]
    mapper: BinMapper
    data: BinnedData
    evals: list[EvalData]
    progress: Progress
    #: Layered mode: the features each depth may split on, and how many layers the hosts
    #: take part in (None: all; :mod:`p2pboost.hetero.training.modes`).
    features_by_depth: DepthMask | None = None
    host_layers: int | None = None

    def __post_init__(self) -> None:
        p = self.params
        self.builder = make_builder(self.data, p.sparse_aware, with_counts=p.min_samples_leaf > 1)
        self.candidates = candidate_mask(self.mapper.n_bins, p.max_bin)
        offsets = np.cumsum([self.data.n_features] + [lk.n_features for lk in self.links])
        self.host_slices = [slice(int(a), int(b)) for a, b in itertools.pairwise(offsets)]
        self._filling: asyncio.Task[int] | None = None
        self._stop_filling = asyncio.Event()
        self._entered = False

    async def __aenter__(self) -> GuestTrainer:
        self._entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop making randomisers (training ended or failed) before the block is left."""
        self._entered = False
        await self._stop(wait=False)

    def _start_filling(self, target: int) -> None:
        """Make randomisers for the next tree while the pool idles (the hosts' turn)."""
        if not self.config.precompute or target <= 0:
            return
        self._stop_filling = asyncio.Event()
        self._filling = asyncio.ensure_future(
            self.engine.precompute_while_idle(target, self._stop_filling)
        )

    async def _stop(self, *, wait: bool) -> None:
        """Stop filling; with ``wait``, let running tasks land in the stash first."""
        filling, self._filling = self._filling, None
        if filling is None:
            return
        self._stop_filling.set()
        if not wait:
            filling.cancel()
        await asyncio.gather(filling, return_exceptions=True)

    async def grow(
        self,
        tree_id: int,
        task: TreeTask,
        chain: str,
        *,
        more: bool = True,
        columns: NodeColumns | None = None,
    ) -> GrownTree:
        """Grow one tree of the round loop with the hosts (``chain``: the fingerprint chain
        after the trees before it; ``more``: another tree may follow, so it is worth making
        randomisers while waiting for the hosts; ``columns``: the tree's per-depth and
        per-node column draws, whose root draw goes with the tree's start)."""
        if not self._entered:
            raise RuntimeError("grow a tree inside `async with trainer:`, which owns its tasks")
        self.progress.tree = tree_id
        await self._stop(wait=True)  # at most one short task per worker still running
        sample = task.sample
        if task.privacy is not None and sample is not None and sample.size == 0:
            raise InputError(
                f"private tree {tree_id} drew no rows: with this many rows, use fewer trees "
                "per ensemble (dp.trees_per_ensemble) or a larger learning rate"
            )
        rows = np.arange(self.data.n_rows) if sample is None else sample
        g_grid, h_grid = task.grids
        outputs = int(task.grad.shape[1])  # a multi-output tree packs every class in a row
        spec = packing_spec(int(rows.size), task.grids, self.engine.public_key, outputs)
        mask = None
        if sample is not None:
            bits = np.zeros(self.data.n_rows, dtype=np.bool_)
            bits[sample] = True
            mask = np.packbits(bits)
        # A host none of whose features the tree may use takes no part in it: no gradients,
        # no packages, no partitions (it learns only that; complete_secure trees are so).
        active = [
            link
            for link, sl in zip(self.links, self.host_slices, strict=True)
            if task.features[sl].any()
        ]
        first = None if columns is None else columns.ahead(1)[0]  # the root's column draw
        for link, sl in zip(self.links, self.host_slices, strict=True):
            start = TreeStart(
                tree_id,
                grid_wire(g_grid, h_grid),
                mask,
                task.features[sl].astype(np.uint8),
                chain,
                None if first is None else first[sl].astype(np.uint8),
                outputs,
            )
            await send(link.ctl, start)
        grower = TreeGrower(
            self.data,
            self.builder,
            self.params,
            task.grad,
            task.hess,
            sample,
            self.candidates & task.features[: self.data.n_features, None, None],
            self.mapper.thresholds,
            task.privacy,
            self.features_by_depth,
            columns,
        )
        self.progress.enter(GuestPhase.ENCRYPT, 0)
        stream = asyncio.ensure_future(
            self._stream_gradients(spec, task.grad, task.hess, rows, g_grid, h_grid, active)
        )
        try:
            root = await asyncio.to_thread(grower.root)
            await stream
        finally:
            if not stream.done():
                stream.cancel()
                await asyncio.gather(stream, return_exceptions=True)
        if more:
            self._start_filling(int(rows.size))
        layers = _TreeRound(self, tree_id, grower, spec, task.grids, active)
        tree = await drive_async(grower.schedule(root), layers.answer)
        eval_leaves = []
        for i, ev in enumerate(self.evals):
            go_left = tree.local_decisions_binned(ev.data.codes, ev.data.missing_bin)
            for node, per_set in layers.eval_bits.items():
                go_left[node] = per_set[i]
            eval_leaves.append(tree.leaves(go_left))
        return GrownTree(tree, grower.positions, eval_leaves)

    async def _stream_gradients(
        self,
        spec: PackingSpec,
        gq: F64,
        hq: F64,
        rows: I64,
        g_grid: Grid,
        h_grid: Grid,
        active: Sequence[HostLink],
    ) -> None:
        """Pack and encrypt each chunk on the pool (ciphertext bytes back), and send it to
        every ``active`` host (none: nothing to encrypt); the loop only slices arrays and
        wraps bytes.

        The engine cuts each chunk into up to one task per worker, none holding more than
        ``1 / (4 W)`` of the tree's rows (:meth:`~p2pboost.crypto.engine.CryptoEngine.
        encrypt_packed`), so the growing chunks the wire prefers do not leave workers idle."""
        if not active:
            return
        gi = to_fixed(gq[rows], g_grid)  # (rows, outputs)
        hi = to_fixed(hq[rows], h_grid)
        # The cap counts ciphertexts: a row of several planes (multi-output) weighs that many,
        # so a chunk's bytes stay bounded whatever the outputs.
        first = self.config.chunk_rows
        largest = max(first, self.config.max_chunk_rows // spec.plaintexts_per_row)
        bounds = chunk_bounds(rows.size, first, largest)
        pk = self.engine.public_key

        def encrypt(start: int, stop: int) -> asyncio.Future[bytes]:
            sl = slice(start, stop)
            return asyncio.ensure_future(
                self.engine.encrypt_packed(spec, gi[sl], hi[sl], stream_rows=int(rows.size))
            )

        # Pieces in flight: up to four per worker (a few chunks, each cut into up to one piece
        # per worker), so every worker has its next piece queued while the loop sends a
        # chunk, and the ciphertexts held ahead stay a few chunks' worth however many workers.
        planes = spec.plaintexts_per_row
        tasks = [len(self.engine.piece_cuts(b - a, planes, int(rows.size))) - 1 for a, b in bounds]
        pending: deque[tuple[asyncio.Future[bytes], int]] = deque()
        in_flight = started = 0

        def fill() -> None:
            nonlocal in_flight, started
            while started < len(bounds) and (
                not pending or in_flight + tasks[started] <= _PIECES_AHEAD * self.workers
            ):
                pending.append((encrypt(*bounds[started]), tasks[started]))
                in_flight += tasks[started]
                started += 1

        try:
            fill()
            for start, _ in bounds:
                future, count = pending.popleft()
                data = await future
                in_flight -= count
                fill()  # the next pieces run while this chunk goes out
                msg = Chunk(start, CiphertextBatch.of(pk, data))
                await gather_or_cancel(*(send(link.grad, msg) for link in active))
        finally:
            for fut, _ in pending:
                fut.cancel()
            await asyncio.gather(*(fut for fut, _ in pending), return_exceptions=True)


class _TreeRound:
    """One tree's layers on the guest side."""

    def __init__(
        self,
        trainer: GuestTrainer,
        tree_id: int,
        grower: TreeGrower,
        spec: PackingSpec,
        grids: tuple[Grid, Grid],
        active: Sequence[HostLink],
    ) -> None:
        self.t = trainer
        self.tree_id = tree_id
        #: The hosts this tree uses (those with a feature it may split on).
        self.links = list(active)
        self.grower = grower
        self.spec = spec
        self.grids = grids
        #: Node -> (the owner's chosen id, left-set bits) of this layer's host splits.
        self.chosen: dict[int, tuple[int, B8]] = {}
        #: Host split node -> validation-set bits (one bool array per evaluation set).
        self.eval_bits: dict[int, list[B8]] = {}
        #: The last layer's opened packages (a derived package's parent is among them), and
        #: each frontier node's (parent, sibling).
        self.opened: dict[tuple[int, int], OpenPackage] = {}
        self.family: dict[int, tuple[int, int]] = {}

    def _local(self, depth: int) -> bool:
        """Whether the layer at ``depth`` is the guest's alone (layered mode's lower layers)."""
        top = self.t.host_layers
        return top is not None and depth >= top

    async def answer(self, step: GrowStep) -> Any:
        """Answer a step of the core's schedule (see the module docstring)."""
        depth = step.frontier.depth
        if isinstance(step, ChooseSplits):
            self.t.progress.enter(GuestPhase.SPLITS, depth)
            if self._local(depth):  # no host takes part: the guest's candidates only
                return await asyncio.to_thread(self.grower.find_splits, step.frontier)
            return await self._choose_splits(step.frontier)
        if isinstance(step, Partition):
            self.t.progress.enter(GuestPhase.PARTITION, depth)
            if self._local(depth):
                return await asyncio.to_thread(self.grower.partition, step.plan)
            # The hosts leave the tree after its last host layer (layered mode).
            return await self._partition(step.plan, step.grow and not self._local(depth + 1))
        return await asyncio.to_thread(self.grower.child_histograms, step.frontier, step.plan)

    async def _choose_splits(self, frontier: Frontier) -> LayerSplits:
        """The guest's best split per node against every host's candidates (the core's
        rules), with the owners' answers for the host splits that are accepted."""
        if self.grower.privacy is not None:
            own, packages, winners = await self._choose_private(frontier, self.grower.privacy)
        else:
            own, packages = await gather_or_cancel(
                asyncio.to_thread(self.grower.find_splits, frontier),
                self._receive_layer(frontier),
            )
            winners = self._choose(frontier, own, packages)
        self.t.progress.enter(GuestPhase.DECIDE, frontier.depth)
        gain = np.array([w.gain for w in winners], dtype=np.float64)
        accept = accepted(gain, self.t.params).tolist()
        self.chosen = await self._decide(frontier, winners, accept)
        owner = np.array([w.owner for w in winners], dtype=np.int64)
        host = owner != GUEST
        left_grad, left_hess = own.left_grad.copy(), own.left_hess.copy()
        for i in accept:
            if host[i]:
                node = int(frontier.nodes[i])
                pkg = packages[(winners[i].owner, node)]
                pos = int(np.flatnonzero(pkg.ids == np.uint64(self.chosen[node][0]))[0])
                left_grad[i], left_hess[i] = pkg.grad[pos], pkg.hess[pos]
        return LayerSplits(
            gain=gain,
            feature=np.where(host, -1, own.feature),
            threshold=np.where(host, -1, own.threshold),
            default_left=own.default_left & ~host,
            left_grad=left_grad,
            left_hess=left_hess,
            left_count=np.full(gain.size, -1, dtype=np.int64),
            owner=owner,
        )

    async def _choose_private(
        self, frontier: Frontier, privacy: PrivateTree
    ) -> tuple[LayerSplits, dict[tuple[int, int], OpenPackage], list[_Winner]]:
        """A private tree's choice (:func:`~p2pboost.hetero.training.private.choose_private`) over
        the guest's candidates and every host's package."""
        own_scores, packages = await gather_or_cancel(
            asyncio.to_thread(
                privacy.layer_scores,
                frontier.hist,
                frontier.grad,
                frontier.hess,
                self.grower.candidates_at(frontier.depth),
            ),
            self._receive_layer(frontier),
        )
        hosts = []
        for link in self.links:
            pkgs = [packages[(link.index, int(n))] for n in frontier.nodes.tolist()]
            if len({len(p.ids) for p in pkgs}) > 1:
                raise reject(link.name, "a private run needs every candidate at every node")
            hosts.append(HostCandidates(link.index, [(p.grad, p.hess) for p in pkgs]))
        choice = choose_private(
            privacy, frontier, own_scores, hosts, self.grower.candidates.shape[:2]
        )
        winners = []
        for i, node in enumerate(frontier.nodes.tolist()):
            owner, pos = int(choice.owner[i]), int(choice.position[i])
            if owner < 0:
                winners.append(_Winner(GUEST, -np.inf))
            elif owner == GUEST:
                winners.append(_Winner(GUEST, 0.0))
            else:
                ids = packages[(owner, node)].ids
                winners.append(_Winner(owner, 0.0, ids[pos : pos + 1]))
        return choice.own, packages, winners

    # -- receiving and scoring host candidates ----------------------------------------------

    async def _receive_layer(self, frontier: Frontier) -> dict[tuple[int, int], OpenPackage]:
        """Every host's package for every frontier node, decrypted as each arrives."""
        parts = await gather_or_cancel(*(self._receive_host(link, frontier) for link in self.links))
        self.opened = {k: v for part in parts for k, v in part.items()}
        return self.opened

    async def _receive_host(
        self, link: HostLink, frontier: Frontier
    ) -> dict[tuple[int, int], OpenPackage]:
        expected = {int(n): i for i, n in enumerate(frontier.nodes.tolist())}
        decrypting: dict[int, asyncio.Future[OpenPackage]] = {}
        derived: dict[int, Derived] = {}
        try:
            for _ in range(len(expected)):
                msg = await recv(link.info, (Package, Derived))
                if msg.tree != self.tree_id:
                    raise reject(link.name, "package for another tree")
                node = msg.node
                if node not in expected or node in decrypting or node in derived:
                    raise reject(link.name, f"unexpected package for node {node}")
                node_count = int(frontier.count[expected[node]])
                if msg.counts.size and msg.counts.max() > node_count:
                    raise reject(link.name, "split-info count above the node's rows")
                if isinstance(msg, Derived):
                    derived[node] = msg
                    continue
                problem = check_package(msg, self.spec, self.t.engine.public_key)
                if problem is not None:
                    raise reject(link.name, f"bad split-info package: {problem}")
                decrypting[node] = asyncio.ensure_future(self._open(link.name, msg))
            results = await gather_or_cancel(*decrypting.values())
        finally:
            for fut in decrypting.values():
                fut.cancel()
            await asyncio.gather(*decrypting.values(), return_exceptions=True)
        opened = dict(zip(decrypting, results, strict=True))
        for node, msg in derived.items():
            opened[node] = self._derive(link, msg, opened)
        return {(link.index, n): r for n, r in opened.items()}

    def _derive(self, link: HostLink, msg: Derived, opened: dict[int, OpenPackage]) -> OpenPackage:
        """A larger child's package from its parent's (last layer) and its sibling's (this
        layer, sent with sums)."""
        if self.grower.privacy is not None:
            raise reject(link.name, "a private tree takes every node's sums from the host")
        if self.family.get(msg.node) != (msg.parent, msg.sibling):
            raise reject(link.name, f"node {msg.node} derived from other than its parent")
        parent = self.opened.get((link.index, msg.parent))
        sibling = opened.get(msg.sibling)
        if parent is None or sibling is None:
            raise reject(link.name, f"node {msg.node} derived from a package it did not send")
        try:
            return derive(msg, parent, sibling, self.grids)
        except ValueError as exc:
            raise reject(link.name, f"bad derived package for node {msg.node}: {exc}") from None

    async def _open(self, peer: str, msg: Package) -> OpenPackage:
        """Decrypt and unpack a package in the pool (bytes in, exact integer sums out)."""
        try:
            g_int, h_int = await self.t.engine.open_split_infos(
                self.spec, msg.ciphertexts.data, msg.counts
            )
        except CodecError as exc:
            raise reject(peer, f"bad split-info package: {exc}") from None
        except CryptoError as exc:
            raise reject(peer, f"split-info sums do not decode: {exc}") from None
        return open_package(msg.ids, msg.counts, g_int, h_int, self.grids)

    def _choose(
        self, frontier: Frontier, own: LayerSplits, packages: dict[tuple[int, int], OpenPackage]
    ) -> list[_Winner]:
        """Per node, the core's choice between the guest's best and each host's candidates."""
        p = self.t.params
        winners = []
        for i, node in enumerate(frontier.nodes.tolist()):
            best = _Winner(GUEST, float(own.gain[i]))
            G, H = frontier.grad[i : i + 1], frontier.hess[i : i + 1]
            for link in self.links:
                pkg = packages[(link.index, node)]
                if len(pkg.ids) == 0:
                    continue
                gains = split_gains(pkg.grad, pkg.hess, G, H, p.reg_lambda)
                # The core's validity rules (min_child_weight for every output; min_samples_leaf
                # on counts).
                valid = np.all(pkg.hess >= p.min_child_weight, axis=1) & np.all(
                    H - pkg.hess >= p.min_child_weight, axis=1
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

        async def ask(link: HostLink, idx: list[int]) -> dict[int, tuple[int, B8]]:
            nodes = frontier.nodes[idx].astype(np.int64)
            ids = [tied for i in idx if (tied := winners[i].tied) is not None]
            await send(link.ctl, Decide(nodes, ids))
            reply = await recv(link.ctl, Decided)
            chosen, bitmaps, evals = reply.ids, reply.bitmaps, reply.eval
            if chosen.size != len(idx):
                raise reject(link.name, f"decided {chosen.size} nodes, {len(idx)} asked")
            out = {}
            for j, i in enumerate(idx):
                tied = winners[i].tied
                assert tied is not None
                if chosen[j] not in tied:
                    raise reject(link.name, "chose an id that was not offered")
                node = int(nodes[j])
                out[node] = (
                    int(chosen[j]),
                    unpack_bitmap(bitmaps[j], int(counts[node]), link.name),
                )
                ev = evals[j]
                if len(ev) != len(self.t.evals):
                    raise reject(link.name, "evaluation bits per set expected")
                self.eval_bits[node] = [
                    unpack_bitmap(b, e.y.size, link.name)
                    for b, e in zip(ev, self.t.evals, strict=True)
                ]
            return out

        asks = [ask(self.t.links[k - 1], idx) for k, idx in sorted(by_host.items())]
        parts = await gather_or_cancel(*asks)
        return {k: v for part in parts for k, v in part.items()}

    async def _partition(self, plan: LayerPlan, grow: bool) -> None:
        """New positions from the guest's own splits and the owners' bitmaps; tell the hosts."""
        grower = self.grower
        old = grower.positions
        await asyncio.to_thread(grower.partition, plan)  # the guest's own splits
        new = grower.positions.copy()
        bitmaps = []
        self.family = {}
        for j, node in enumerate(plan.nodes.tolist()):
            left, right = int(plan.left[j]), int(plan.right[j])
            self.family[left], self.family[right] = (node, right), (node, left)
            rows = np.flatnonzero(old == node)
            if plan.owner[j] == GUEST:
                go_left = new[rows] == plan.left[j]
            else:
                go_left = self.chosen[node][1]
                new[rows] = np.where(go_left, plan.left[j], plan.right[j])
            bitmaps.append(np.packbits(go_left))
        grower.positions = new
        # The next depth's column draws, early, so each host knows its children's (the core's
        # draws: nothing draws in between).
        columns = grower.columns
        draws = columns.ahead(2 * plan.nodes.size) if grow and columns is not None else None
        msg = Layer(
            plan.nodes.astype(np.int64),
            plan.left.astype(np.int64),
            plan.right.astype(np.int64),
            bitmaps,
            grow,
        )

        def to(link: HostLink) -> Layer:
            if draws is None:
                return msg
            block = self.t.host_slices[link.index - 1]
            return replace(msg, features=[d[block].astype(np.uint8) for d in draws])

        await gather_or_cancel(*(send(link.ctl, to(link)) for link in self.links))
