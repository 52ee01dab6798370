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

from p2pboost.crypto.compress import SplitInfoPackage
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
    RemoteProtocolError,
)
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.gbdt.split import candidate_mask
from p2pboost.hetero._common import (
    B8,
    I64,
    HostPhase,
    Progress,
    array_field,
    expect,
    int_field,
    list_field,
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
from p2pboost.hetero.model import HostSplit
from p2pboost.net.node import Channel
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
            msg = await self.ctl.recv()
            kind = msg.get("t") if isinstance(msg, dict) else None
            if kind == "done":
                done = expect(msg, "done", self.guest)
                fp = done.get("fingerprint")
                if not isinstance(fp, str) or not 1 <= len(fp) <= 128:
                    raise RemoteProtocolError("bad model fingerprint", peer=self.guest)
                if int_field(done, "n_trees", self.guest, 0, 1 << 40) != n_trees:
                    raise RemoteProtocolError(
                        "tree count differs from the trees grown", peer=self.guest
                    )
                self.progress.enter(HostPhase.FINISH)
                await self.ctl.send({"t": "bye"})
                return fp
            tree_msg = expect(msg, "tree", self.guest)
            if int_field(tree_msg, "tree", self.guest, 0, 1 << 40) != n_trees:
                raise RemoteProtocolError("trees out of order", peer=self.guest)
            self.progress.tree = n_trees
            await _HostTree(self, n_trees, tree_msg).run()
            n_trees += 1


class _HostTree:
    """One tree on the host side."""

    def __init__(self, host: Host, tree_id: int, msg: dict[str, Any]) -> None:
        self.h = host
        self.tree_id = tree_id
        peer, n = host.guest, host.data.n_rows
        grid = msg.get("grid")
        if not (isinstance(grid, list) and len(grid) == 4 and all(type(v) is int for v in grid)):
            raise RemoteProtocolError("grid must be four integers", peer=peer)
        if msg.get("sample") is None:
            self.sample = np.arange(n, dtype=np.int64)
        else:
            self.sample = np.flatnonzero(unpack_bitmap(msg["sample"], n, peer)).astype(np.int64)
            if self.sample.size == 0:
                raise RemoteProtocolError("empty row sample", peer=peer)
        features = array_field(msg, "features", peer, np.uint8, (host.data.n_features,))
        if features.max(initial=0) > 1:
            raise RemoteProtocolError("feature mask must hold 0 or 1", peer=peer)
        self.allowed = host.allowed & features.astype(np.bool_)[:, None, None]
        m = int(self.sample.size)
        try:
            grids = (Grid(grid[0], grid[1], m), Grid(grid[2], grid[3], m))
            if any(not -1100 <= v <= 1100 for v in grid) or any(gr.value_bits > 62 for gr in grids):
                raise InputError("grid exponents out of range")
            self.spec = packing_spec(m, grids, host.public_key)
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
            layer = expect(msg, "layer", h.guest)
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
                    offload(h.pool, chunk_histogram, h.public_key, codes[:, g], h.data.n_slots, cts)
                    for g in h.groups
                )
            )

        try:
            while len(self.cts) < m:
                msg = expect(await h.grad.recv(), "chunk", peer)
                start = int_field(msg, "start", peer, 0, m)
                batch = msg.get("ct")
                if start != len(self.cts) or not isinstance(batch, CiphertextBatch):
                    raise RemoteProtocolError(
                        "gradient chunks out of order or malformed", peer=peer
                    )
                if not 0 < len(batch) <= m - start:
                    raise RemoteProtocolError("gradient chunk of a wrong size", peer=peer)
                try:
                    cts = batch.ciphertexts(h.public_key)
                except (CodecError, KeyMismatchError) as exc:
                    raise RemoteProtocolError(
                        f"bad gradient ciphertexts: {exc}", peer=peer
                    ) from None
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
        nodes = array_field(msg, "nodes", peer, np.int64, None)
        tied = list_field(msg, "ids", peer, nodes.size)
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
            evals.append([np.packbits(_go_left(e.codes[f], b, dl, e.missing_bin)) for e in h.evals])
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
        nodes = array_field(msg, "nodes", peer, np.int64, None)
        k = nodes.size
        left = array_field(msg, "left", peer, np.int64, (k,))
        right = array_field(msg, "right", peer, np.int64, (k,))
        bitmaps = list_field(msg, "bitmaps", peer, k)
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
            raise RemoteProtocolError(
                "layer splits unknown nodes or numbers children oddly", peer=peer
            )
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
