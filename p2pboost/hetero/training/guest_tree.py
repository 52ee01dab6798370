"""The guest's side of one tree: its start, the encrypted gradient stream, and randomisers made
ahead while the hosts work.

:class:`GuestTrainer` grows each tree with the plaintext core's
:class:`~p2pboost.gbdt.grower.TreeGrower` and its schedule
(:meth:`~p2pboost.gbdt.grower.HistogramGrower.schedule`): it tells the hosts the tree's start
(grids, sampled rows, features), packs and encrypts the gradients on the pool and streams them
in growing chunks while the guest builds its own root histogram, then hands the layers to
:class:`~p2pboost.hetero.training.guest_layers.TreeLayers`, which answers the core's steps
(choose splits, partition, child histograms) with the hosts' help.

Children, leaf weights and tree arrays are the core's own ``apply_splits``; the tree that
comes out is a core :class:`~p2pboost.gbdt.tree.Tree` with an owner per split. The
protocol and its messages are described in :mod:`p2pboost.hetero.training.guest`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.packing import PackingSpec
from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import Grid, to_fixed
from p2pboost.gbdt.grower import (
    DepthMask,
    NodeColumns,
    TreeGrower,
    drive_async,
)
from p2pboost.gbdt.histogram import make_builder
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import EvalData, TreeTask
from p2pboost.gbdt.split import candidate_mask
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero._messages import Chunk, TreeStart
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.training.common import (
    F64,
    I64,
    GuestPhase,
    Progress,
    chunk_bounds,
    grid_wire,
    packing_spec,
)
from p2pboost.hetero.training.constraints import GuestConstraints
from p2pboost.hetero.training.guest_layers import HostLink, TreeLayers
from p2pboost.protocols._messages import send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = ["GrownTree", "GuestTrainer"]

#: Encryption tasks the guest keeps in flight per worker while it streams a tree's gradients.
_PIECES_AHEAD = 4


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
    #: Monotone and interaction constraints over the guest's and the hosts' features
    #: (:mod:`p2pboost.hetero.training.constraints`; None: none).
    constraints: GuestConstraints | None = None

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
        """Stop filling: with ``wait`` the filling ends of itself (it returns at once; its
        running tasks land in the stash when they end), else it is cancelled (training over:
        nothing more goes into the stash)."""
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
        await self._stop(wait=True)  # returns at once: running tasks land when they end
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
            None if self.constraints is None else self.constraints.features,
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
        layers = TreeLayers(self, tree_id, grower, spec, task.grids, active)
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
