"""A host's side of each tree: ciphertext histograms, split-info packages, owned splits.

:class:`Host` answers the guest until it says "done". Per tree it accumulates the root
histogram chunk by chunk as ciphertexts arrive, then per layer builds the smaller child of each
split and derives the sibling by subtraction, and streams each node's shuffled, compressed
candidates as soon as they are ready. Ciphertext work runs in the process pool, one task per
group of features (:mod:`p2pboost.hetero._kernels`). The id -> (feature, bin,
direction) lookups and the thresholds never leave this module.
"""

from __future__ import annotations

import asyncio
import secrets
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.engine import PaillierEngine
from p2pboost.crypto.histogram import EncryptedHistogram
from p2pboost.crypto.paillier import (
    CiphertextBatch,
    PublicKey,
)
from p2pboost.exceptions import (
    CodecError,
    InputError,
    KeyMismatchError,
)
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.gbdt.split import candidate_mask
from p2pboost.hetero._common import (
    B8,
    I64,
    HostPhase,
    Progress,
    offload,
    packing_spec,
    unpack_bitmap,
)
from p2pboost.hetero._kernels import (
    Candidates,
    candidate_sums,
    child_histograms,
    chunk_histogram,
)
from p2pboost.hetero._messages import (
    Bye,
    Chunk,
    Decide,
    Decided,
    Done,
    Layer,
    Package,
    TreeStart,
)
from p2pboost.hetero.model import HostSplit
from p2pboost.net.node import Channel
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = ["Host"]


@dataclass
class Host:
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
            msg = await recv(self.ctl, (TreeStart, Done))
            if isinstance(msg, Done):
                if msg.n_trees != n_trees:
                    raise reject(self.guest, "tree count differs from the trees grown")
                self.progress.enter(HostPhase.FINISH)
                await send(self.ctl, Bye())
                return msg.fingerprint
            if msg.tree != n_trees:
                raise reject(self.guest, "trees out of order")
            self.progress.tree = n_trees
            await _HostTree(self, n_trees, msg).run()
            n_trees += 1


class _HostTree:
    """One tree on the host side."""

    def __init__(self, host: Host, tree_id: int, msg: TreeStart) -> None:
        self.h = host
        self.tree_id = tree_id
        peer, n = host.guest, host.data.n_rows
        grid = msg.grid
        if msg.sample is None:
            self.sample = np.arange(n, dtype=np.int64)
        else:
            self.sample = np.flatnonzero(unpack_bitmap(msg.sample, n, peer)).astype(np.int64)
            if self.sample.size == 0:
                raise reject(peer, "empty row sample")
        features = msg.features
        if features.shape != (host.data.n_features,) or features.max(initial=0) > 1:
            raise reject(peer, "the feature mask must hold one 0 or 1 per feature")
        self.allowed = host.allowed & features.astype(np.bool_)[:, None, None]
        m = int(self.sample.size)
        try:
            grids = (Grid(grid[0], grid[1], m), Grid(grid[2], grid[3], m))
            if any(gr.value_bits > 62 for gr in grids):
                raise InputError("grid exponents out of range")
            self.spec = packing_spec(m, grids, host.public_key)
        except InputError as exc:
            raise reject(peer, f"bad gradient grid: {exc}") from None
        if self.spec.plaintexts_per_row != 1:
            raise reject(peer, "packed gradients must fit one plaintext")
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
            msg = await recv(h.ctl, (Decide, Layer))
            if isinstance(msg, Decide):
                h.progress.enter(HostPhase.DECIDE, depth)
                await self._decide(msg)
                msg = await recv(h.ctl, Layer)
            layer = msg
            grow = self._repartition(layer)
            depth += 1
            if not grow:
                return
            h.progress.enter(HostPhase.LAYER, depth)
            await self._layer()

    async def _root(self) -> list[EncryptedHistogram]:
        """Accumulate the root histogram chunk by chunk, as chunks arrive."""
        h, peer = self.h, self.h.guest
        m = int(self.sample.size)
        acc: list[EncryptedHistogram | None] = [None] * len(h.groups)
        pending: list[asyncio.Future[list[EncryptedHistogram]]] = []

        async def chunk_task(codes: npt.NDArray[Any], cts: list[Any]) -> list[EncryptedHistogram]:
            return await gather_or_cancel(
                *(
                    offload(h.pool, chunk_histogram, h.public_key, codes[:, g], h.data.n_slots, cts)
                    for g in h.groups
                )
            )

        try:
            while len(self.cts) < m:
                msg = await recv(h.grad, Chunk)
                start, batch = msg.start, msg.ct
                if start != len(self.cts):
                    raise reject(peer, "gradient chunks out of order or malformed")
                if not 0 < len(batch) <= m - start:
                    raise reject(peer, "gradient chunk of a wrong size")
                try:
                    cts = batch.ciphertexts(h.public_key)
                except (CodecError, KeyMismatchError) as exc:
                    raise reject(peer, f"bad gradient ciphertexts: {exc}") from None
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
                offload(h.pool, candidate_sums, hist, self.allowed[g], h.min_rows)
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
        await send(
            h.info,
            Package(
                self.tree_id,
                node,
                np.array(id_list, dtype=np.uint64),
                counts[order].astype(np.int64) if order else np.empty(0, np.int64),
                CiphertextBatch.from_ciphertexts(h.public_key, compressed),
            ),
        )

    async def _decide(self, msg: Decide) -> None:
        """Resolve the guest's winning ids: the lowest (feature, bin, direction) among ties."""
        h, peer = self.h, self.h.guest
        chosen, bitmaps, evals = [], [], []
        for node, ids in zip(msg.nodes.tolist(), msg.ids, strict=True):
            lookup = self.lookups.get(node)
            if lookup is None or node not in self.frontier:
                raise reject(peer, f"node {node} is not being split")
            if any(int(i) not in lookup for i in ids.tolist()):
                raise reject(peer, f"unknown split id for node {node}")
            best = min(ids.tolist(), key=lambda i: _order(lookup[int(i)]))
            f, b, dl = lookup[int(best)]
            rows = np.flatnonzero(self.positions == node)
            chosen.append(best)
            bitmaps.append(np.packbits(_go_left(h.data.codes[f, rows], b, dl, h.data.missing_bin)))
            evals.append([np.packbits(_go_left(e.codes[f], b, dl, e.missing_bin)) for e in h.evals])
            h.splits.append(HostSplit(self.tree_id, node, f, b, h.mapper.threshold(f, b), dl))
        await send(h.ctl, Decided(np.array(chosen, dtype=np.uint64), bitmaps, evals))

    def _repartition(self, msg: Layer) -> bool:
        """Apply the guest's left-set bitmaps; returns whether the tree grows another layer."""
        peer = self.h.guest
        nodes, left, right, bitmaps, grow = msg.nodes, msg.left, msg.right, msg.bitmaps, msg.grow
        k = nodes.size
        fresh = self.n_nodes + 2 * np.arange(k)
        if (
            np.unique(nodes).size != k
            or not set(nodes.tolist()) <= set(self.frontier)
            or not np.array_equal(left, fresh)
            or not np.array_equal(right, fresh + 1)
        ):
            raise reject(peer, "layer splits unknown nodes or numbers children oddly")
        new = self.positions.copy()
        for j, node in enumerate(nodes.tolist()):
            rows = np.flatnonzero(self.positions == node)
            go_left = unpack_bitmap(bitmaps[j], rows.size, peer)
            new[rows] = np.where(go_left, left[j], right[j])
        self.positions = new
        self.n_nodes += 2 * k
        self.layer_nodes, self.layer_left, self.layer_right = nodes, left, right
        self.frontier = [
            c for pair in zip(left.tolist(), right.tolist(), strict=True) for c in pair
        ]
        for node in nodes.tolist():
            self.lookups.pop(node, None)
        if grow and k == 0:
            raise reject(peer, "asked to grow a layer without splits")
        return grow

    async def _layer(self) -> None:
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
                    offload(h.pool, child_histograms, par, codes[:, g], cts)
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
