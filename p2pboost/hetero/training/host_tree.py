"""A host's side of each tree: ciphertext histograms, split-info packages, owned splits.

:class:`Host` answers the guest until it says "done". Per tree it spreads the gradient chunks
over its row shards as they arrive (each shard adds its rows to the root's partial histogram),
then per layer has every shard build its part of the smaller child of each split and derive
the sibling by subtraction, and streams each node's shuffled, compressed candidates as soon as
they are ready. The shards live in pinned worker processes and keep the tree's ciphertexts
and histograms there (:mod:`p2pboost.hetero.training.shards`); only bytes and row numbers travel.

A node's package is made in two steps, both off the event loop:

1. every shard returns the node's candidates and its partial left sum of each (bytes);
2. the loop draws one uniformly random order over *all* the node's candidates and random
   opaque ids (numpy on bytes from ``os.urandom``: no per-candidate Python), reorders the
   shards' sums by it, and one task per run of whole ciphertexts multiplies the partial sums
   and compresses them (:meth:`~p2pboost.crypto.engine.CryptoEngine.compress_parts`).

The second hop is the price of privacy: compressing inside each shard would put the sums of
one shard's rows, or in a feature-group design one group's features, into the same ciphertexts
in a telling order. Here every ciphertext holds a random draw of the node's candidates. The id
-> (feature, bin, direction) lookups and the thresholds never leave this module.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.exceptions import CodecError, InputError
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.gbdt.split import candidate_mask, min_child_rows
from p2pboost.hetero._messages import (
    PRIVATE_ORDERED,
    Bye,
    Chunk,
    Decide,
    Decided,
    Derived,
    Done,
    Layer,
    Package,
    TreeStart,
)
from p2pboost.hetero.model import HostSplit
from p2pboost.hetero.training import shards as k
from p2pboost.hetero.training.candidates import NodeCandidates, node_counts
from p2pboost.hetero.training.common import (
    B8,
    I64,
    HostPhase,
    Progress,
    packing_spec,
    positions,
    unpack_bitmap,
)
from p2pboost.hetero.training.layout import chunk_parts, shard_block
from p2pboost.net.node import Channel
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import PinnedExecutor

__all__ = ["Host", "Shards"]

#: Chunk tasks a shard may have queued before the host stops reading gradients (back-pressure).
CHUNKS_AHEAD = 2
#: Splits of a layer queued in the shards at once: each shard runs its tasks in order, so a
#: node's compression must not wait behind every other split of the layer (packages stream).
SPLITS_AHEAD = 2


class Shards:
    """The event loop's handle on a host's row shards, one per worker of ``pool``."""

    def __init__(self, pool: PinnedExecutor) -> None:
        self.pool = pool
        self.n = pool.workers
        self.token = secrets.token_hex(16)  # names this run's state in the shared workers

    def call(self, shard: int, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        # A name per shard: on a cluster, two shards may end up in one worker.
        future: Future[Any] = self.pool.submit_to(shard, fn, f"{self.token}-{shard}", *args)
        return asyncio.wrap_future(future)

    async def each(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(token, *args)`` in every shard, results in shard order."""
        return await gather_or_cancel(*(self.call(i, fn, *args) for i in range(self.n)))

    async def open(
        self,
        scheme: str,
        key: bytes,
        codes: npt.NDArray[Any],
        n_slots: int,
        min_rows: int,
        sparse: bool | str,
    ) -> None:
        await gather_or_cancel(
            *(
                self.call(i, k.shard_open, scheme, key, codes, n_slots, min_rows, i, self.n, sparse)
                for i in range(self.n)
            )
        )

    async def release(self, fn: Callable[..., Any]) -> None:
        """Run a clean-up kernel in every shard, best effort: it runs in ``finally`` blocks,
        where the pool may be broken or gone and the first error must stay the one raised."""
        futures = []
        for i in range(self.n):
            try:
                futures.append(self.call(i, fn))
            except RuntimeError:  # the pool was shut down
                return
        await asyncio.gather(*futures, return_exceptions=True)


@dataclass
class _Lookup:
    """Opaque id -> (feature, bin, missing left) of one node's candidates, sorted by id."""

    ids: npt.NDArray[np.uint64]
    feature: I64
    bin: I64
    default_left: B8

    def find(self, ids: npt.NDArray[np.uint64]) -> I64 | None:
        """Positions of ``ids``, or None if one is unknown."""
        pos = np.searchsorted(self.ids, ids)
        if pos.size and (pos.max() >= self.ids.size or np.any(self.ids[pos] != ids)):
            return None
        return pos.astype(np.int64)

    def ids_of(self, feature: I64, bin_: I64, default_left: B8) -> npt.NDArray[np.uint64]:
        """The ids of candidates ``(feature, bin, default_left)``, every one of which this
        node offered (a derived child's candidates are its parent's and its sibling's)."""
        mine = _candidate_keys(self.feature, self.bin, self.default_left)
        pos = positions(mine, _candidate_keys(feature, bin_, default_left))
        if pos is None:
            raise AssertionError("a derived candidate the node did not offer")
        return np.asarray(self.ids[pos], dtype=np.uint64)


def _candidate_keys(feature: I64, bin_: I64, default_left: B8) -> I64:
    """One integer per (feature, bin, direction) (bins and features far below 2**30)."""
    return (feature.astype(np.int64) << 32) | (bin_.astype(np.int64) << 1) | default_left


@dataclass
class Host:
    """A host's state across trees; :meth:`serve` answers the guest until "done"."""

    guest: str
    ctl: Channel
    grad: Channel
    info: Channel
    public_key: AnyPublicKey
    mapper: BinMapper
    data: BinnedData
    evals: list[BinnedData]
    min_rows: int
    progress: Progress
    #: The guest's min_child_weight: with a tree's hessian bound, more rows a child needs.
    min_child_weight: float = 0.0
    sparse: bool | str = "auto"
    #: Bytes the histograms kept between layers may take, over all shards (None: no bound).
    hist_budget: int | None = None
    #: A private run (``Setup.private``): 0 none, else every candidate, shuffled or ordered.
    private: int = 0
    #: Each feature's token, sent with every candidate when the guest asks (``Setup.tokens``;
    #: :mod:`p2pboost.hetero.training.constraints`); None: not asked.
    tokens: I64 | None = None
    shards: Shards = field(init=False)
    engine: CryptoEngine = field(init=False)
    splits: list[HostSplit] = field(default_factory=list)
    #: Trees already grown (a resumed run: ``splits`` holds theirs).
    start: int = 0
    #: Called before each tree and at the end with the trees done, the guest's fingerprint
    #: chain after them and the splits so far (the checkpoint ledger of ``host_train``).
    on_tree: Callable[[int, str, Sequence[HostSplit]], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        self.rows_major = np.ascontiguousarray(self.data.codes.T)  # (rows, features)
        self.allowed = candidate_mask(self.mapper.n_bins, self.mapper.max_bin)

    async def serve(self) -> str:
        try:
            pk = self.public_key
            await self.shards.open(
                pk.scheme,
                pk.to_bytes(),
                self.rows_major,
                self.data.n_slots,
                self.min_rows,
                self.sparse,
            )
            return await self._trees()
        finally:
            await self.shards.release(k.shard_close)

    async def _trees(self) -> str:
        n_trees = self.start
        while True:
            msg = await recv(self.ctl, (TreeStart, Done))
            done = msg.n_trees if isinstance(msg, Done) else msg.tree
            if self.on_tree is not None and done == n_trees:
                await self.on_tree(done, msg.chain, self.splits)
            if isinstance(msg, Done):
                if msg.n_trees != n_trees:
                    raise reject(self.guest, "tree count differs from the trees grown")
                self.progress.enter(HostPhase.FINISH)
                await send(self.ctl, Bye())
                return msg.fingerprint
            if msg.tree != n_trees:
                raise reject(self.guest, "trees out of order")
            if msg.features.shape == (self.data.n_features,) and not msg.features.any():
                n_trees += 1  # none of our features may split it: the guest grows it without us
                continue
            self.progress.tree = n_trees
            tree = _HostTree(self, n_trees, msg)
            try:
                await tree.run()
            except BaseException:
                await self.shards.release(k.shard_end_tree)
                raise
            ended = await self.shards.each(k.shard_end_tree)
            self.progress.additions += sum(a for a, _ in ended)
            peak = sum(b for _, b in ended)  # an upper bound of the shards' peak together
            self.progress.hist_peak_bytes = max(self.progress.hist_peak_bytes, peak)
            n_trees += 1


class _HostTree:
    """One tree on the host side."""

    def __init__(self, host: Host, tree_id: int, msg: TreeStart) -> None:
        self.h = host
        self.tree_id = tree_id
        peer, n = host.guest, host.data.n_rows
        grid = msg.grid
        #: Whether each row is in the tree's sample (None: every row is).
        self.in_sample: B8 | None = None
        if msg.sample is None:
            self.sample = np.arange(n, dtype=np.int64)
        else:
            self.in_sample = unpack_bitmap(msg.sample, n, peer)
            self.sample = np.flatnonzero(self.in_sample).astype(np.int64)
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
            self.spec = packing_spec(m, grids, host.public_key, msg.outputs)
        except InputError as exc:
            raise reject(peer, f"bad gradient grid: {exc}") from None
        #: The fewest rows a child may have: the core rejects a candidate with fewer on a side
        #: (min_samples_leaf, and min_child_weight over this tree's hessian bound); 0 in a
        #: private run, which offers every candidate.
        self.min_rows = (
            host.min_rows
            if host.min_rows <= 0
            else min_child_rows(host.min_rows, host.min_child_weight, grids[1].magnitude_bits)
        )
        #: Rows per block of the shards' layout of this tree's sample
        #: (:func:`~p2pboost.hetero.training.layout.shard_block`).
        self.block = shard_block(m, host.shards.n)
        #: Frontier node -> its rows (all of this host's rows, ascending). A split divides its
        #: node's rows, so a layer costs the rows of the nodes it splits, where finding each
        #: node's rows among every row's position cost a pass over all rows per node (on a
        #: million rows and 16 nodes, 60 ms of the event loop per layer against 9).
        self.rows_of: dict[int, I64] = {0: np.arange(n, dtype=np.int64)}
        self.n_nodes = 1
        self.frontier = [0]
        #: Node -> the features its column draw allows (colsample_bylevel/bynode), if any.
        self.node_features: dict[int, B8] = {}
        if msg.root_features is not None:
            self.node_features[0] = self._features(msg.root_features)
        self.lookups: dict[int, _Lookup] = {}
        #: The previous layer's lookups: a derived child's parent is among them.
        self.parent_lookups: dict[int, _Lookup] = {}
        #: Whether the guest derives each split's larger child (:mod:`.shards`): not where
        #: nodes draw their own columns (a child may then offer what its parent did not) nor
        #: in a private run (every candidate, in one layout, at every node).
        self.derive = host.private == 0 and msg.root_features is None
        #: Nodes whose histograms the shards keep for the next layer, and how many may be kept
        #: (the budget over one node's histograms in every shard: each filled cell is a
        #: ciphertext, every used feature may fill all its bins in every plane).
        self.cached = {0}
        used = int(self.allowed.reshape(self.allowed.shape[0], -1).any(axis=1).sum())
        cell = host.public_key.ciphertext_bytes + 40  # an integer object's own header
        node = max(1, used * host.data.n_slots * self.spec.plaintexts_per_row * cell)
        budget = host.hist_budget
        self.capacity = None if budget is None else budget // (node * host.shards.n)

    def _keep(self, splits: list[tuple[int, int, int]], counts: I64) -> list[tuple[bool, bool]]:
        """Which children of ``splits`` (parent, small, big) stay cached: within the capacity
        at every step (a split frees its parent, then may keep children), the larger child
        first (keeping a node saves building its larger child from rows at the next layer,
        so the splits come in order of size)."""
        if self.capacity is None:
            return [(True, True)] * len(splits)
        held = sum(parent in self.cached for parent, _, _ in splits)
        out = []
        for parent, small, _ in splits:
            held -= parent in self.cached
            keep_big = held < self.capacity
            held += keep_big
            keep_small = held < self.capacity and counts[small] > 0
            held += keep_small
            out.append((keep_small, keep_big))
        return out

    async def run(self) -> None:
        h = self.h
        h.progress.enter(HostPhase.ROOT, 0)
        # The root's counts (every sampled row) in a thread while the chunks arrive: needed
        # only once they all have, and counted once rather than by every shard.
        counting = asyncio.ensure_future(
            asyncio.to_thread(_sample_counts, h.rows_major, self.sample, h.data.n_slots)
        )
        try:
            await h.shards.each(
                k.shard_tree,
                self.sample,
                self.allowed,
                self.spec.plaintexts_per_row,
                self.min_rows,
                self.block,
            )
            await self._root()
            counts = await counting
        finally:  # the thread finishes its counting whatever happened; nothing outlives us
            await asyncio.gather(counting, return_exceptions=True)
        root = self.node_features.get(0)
        # Else not even the root stays: children built from rows (or derived: never needed).
        keep = self.capacity != 0 and not self.derive
        await self._send_package(0, await h.shards.each(k.shard_root, counts, root, keep))
        self.cached = {0} if keep else set()
        depth = 0
        while True:
            msg = await recv(h.ctl, (Decide, Layer))
            decided: dict[int, B8] = {}
            if isinstance(msg, Decide):
                h.progress.enter(HostPhase.DECIDE, depth)
                decided = await self._decide(msg)
                msg = await recv(h.ctl, Layer)
            grow = self._repartition(msg, decided)
            depth += 1
            if not grow:
                return
            h.progress.enter(HostPhase.LAYER, depth)
            await self._layer()

    async def _root(self) -> None:
        """Hand each gradient chunk to the shards as it arrives: each shard whose blocks of
        slots it spans gets their ciphertext bytes, a row's planes together, cut out with
        numpy (:func:`~p2pboost.hetero.training.layout.shard_block`: the blocks go to the shards in
        turn)."""
        h, peer = self.h, self.h.guest
        m, n_shards = int(self.sample.size), h.shards.n
        planes = self.spec.plaintexts_per_row
        width = h.public_key.ciphertext_bytes
        pending: deque[asyncio.Future[Any]] = deque()
        received = 0
        try:
            while received < m:
                msg = await recv(h.grad, Chunk)
                start, batch = msg.start, msg.ct
                if start != received:
                    raise reject(peer, "gradient chunks out of order or malformed")
                rows, odd = divmod(len(batch), planes)
                if odd or not 0 < rows <= m - start:
                    raise reject(peer, "gradient chunk of a wrong size")
                if (
                    batch.scheme != h.public_key.scheme
                    or batch.fingerprint != h.public_key.fingerprint
                    or batch.width != width
                ):
                    raise reject(peer, "bad gradient ciphertexts: not under the training key")
                for shard, first, part in chunk_parts(
                    start, batch.data, width * planes, n_shards, self.block
                ):
                    pending.append(h.shards.call(shard, k.shard_chunk, first, part))
                received += rows
                while len(pending) > CHUNKS_AHEAD * n_shards or (pending and pending[0].done()):
                    await self._chunk_done(pending.popleft())
            while pending:
                await self._chunk_done(pending.popleft())
        finally:
            for fut in pending:
                fut.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _chunk_done(self, fut: asyncio.Future[Any]) -> None:
        try:
            await fut
        except CodecError as exc:
            raise reject(self.h.guest, f"bad gradient ciphertexts: {exc}") from None

    async def _send_package(self, node: int, parts: list[NodeCandidates]) -> None:
        """The shards' candidates of ``node`` -> shuffled, ids, compressed -> the guest."""
        h = self.h
        width = h.public_key.ciphertext_bytes * self.spec.plaintexts_per_row  # one candidate's
        head = parts[0]
        n = len(head)
        # A private run with a test seed keeps the core's order (the host allowed it).
        order = np.arange(n) if h.private == PRIVATE_ORDERED else _random_order(n)
        ids = _random_ids(n)
        sums = [
            np.frombuffer(p.sums, dtype=np.uint8).reshape(n, width)[order].tobytes() for p in parts
        ]
        compressed = await h.engine.compress_parts(self.spec, sums) if n else b""
        by_id = np.argsort(ids)
        chosen = order[by_id]
        self.lookups[node] = _Lookup(
            ids[by_id], head.feature[chosen], head.bin[chosen], head.default_left[chosen]
        )
        await send(
            h.info,
            Package(
                self.tree_id,
                node,
                ids,
                head.counts[order],
                CiphertextBatch.of(h.public_key, compressed),
                None if h.tokens is None else h.tokens[head.feature[order]].astype(np.uint32),
            ),
        )

    async def _send_derived(
        self, node: int, parent: int, sibling: int, head: NodeCandidates
    ) -> None:
        """The big child's candidates, shuffled under new ids, each with the ids the same
        candidate has in its parent's and its sibling's packages (the guest subtracts)."""
        n = len(head)
        order, ids = _random_order(n), _random_ids(n)
        f, b, dl = head.feature[order], head.bin[order], head.default_left[order]
        parent_ids = self.parent_lookups[parent].ids_of(f, b, dl)
        sibling_ids = self.lookups[sibling].ids_of(f, b, dl)
        by_id = np.argsort(ids)
        self.lookups[node] = _Lookup(ids[by_id], f[by_id], b[by_id], dl[by_id])
        msg = Derived(
            self.tree_id, node, parent, sibling, ids, head.counts[order], parent_ids, sibling_ids
        )
        await send(self.h.info, msg)

    async def _decide(self, msg: Decide) -> dict[int, B8]:
        """Resolve the guest's winning ids: the lowest (feature, bin, direction) among ties;
        returns each node's left set (over its rows), which the layer may leave out."""
        h, peer = self.h, self.h.guest
        chosen, bitmaps, evals = [], [], []
        left_sets = {}
        for node, ids in zip(msg.nodes.tolist(), msg.ids, strict=True):
            lookup = self.lookups.get(node)
            if lookup is None or node not in self.frontier:
                raise reject(peer, f"node {node} is not being split")
            pos = lookup.find(ids)
            if pos is None:
                raise reject(peer, f"unknown split id for node {node}")
            # The core's candidate order: feature, bin, then missing-left before missing-right.
            first = np.lexsort((~lookup.default_left[pos], lookup.bin[pos], lookup.feature[pos]))
            best = int(pos[first[0]])
            f, b = int(lookup.feature[best]), int(lookup.bin[best])
            dl = bool(lookup.default_left[best])
            rows = self.rows_of[node]
            chosen.append(int(lookup.ids[best]))
            left_sets[node] = _go_left(h.data.codes[f, rows], b, dl, h.data.missing_bin)
            bitmaps.append(np.packbits(left_sets[node]))
            evals.append([np.packbits(_go_left(e.codes[f], b, dl, e.missing_bin)) for e in h.evals])
            h.splits.append(HostSplit(self.tree_id, node, f, b, h.mapper.threshold(f, b), dl))
        await send(h.ctl, Decided(np.array(chosen, dtype=np.uint64), bitmaps, evals))
        return left_sets

    def _features(self, mask: npt.NDArray[np.uint8]) -> B8:
        """A node's column draw, checked: one 0 or 1 per feature of this host."""
        if mask.shape != (self.h.data.n_features,) or mask.max(initial=0) > 1:
            raise reject(self.h.guest, "a node's feature mask must hold one 0 or 1 per feature")
        return mask.astype(np.bool_)

    def _repartition(self, msg: Layer, decided: dict[int, B8]) -> bool:
        """Apply the guest's left-set bitmaps, and the left sets this host ``decided`` where
        the layer leaves them out; returns whether the tree grows another layer."""
        peer = self.h.guest
        marked = set(msg.decided.tolist())
        if marked and marked != set(decided):
            raise reject(peer, "the layer leaves out left sets other than the ones decided here")
        nodes, left, right, bitmaps, grow = msg.nodes, msg.left, msg.right, msg.bitmaps, msg.grow
        if msg.features:
            if len(msg.features) != 2 * nodes.size:
                raise reject(peer, "one feature mask per child expected")
            children = np.column_stack([left, right]).reshape(-1).tolist()
            self.node_features = {
                c: self._features(m) for c, m in zip(children, msg.features, strict=True)
            }
            if self.derive:
                raise reject(peer, "column draws per node in a tree that started without")
        n_split = nodes.size
        fresh = self.n_nodes + 2 * np.arange(n_split)
        if (
            np.unique(nodes).size != n_split
            or not set(nodes.tolist()) <= set(self.frontier)
            or not np.array_equal(left, fresh)
            or not np.array_equal(right, fresh + 1)
        ):
            raise reject(peer, "layer splits unknown nodes or numbers children oddly")
        rows_of = {}
        for j, node in enumerate(nodes.tolist()):
            rows = self.rows_of[node]
            if node in marked:
                go_left = decided[node]
            else:
                go_left = unpack_bitmap(bitmaps[j], rows.size, peer)
            rows_of[int(left[j])], rows_of[int(right[j])] = rows[go_left], rows[~go_left]
        self.rows_of = rows_of  # the nodes not split are leaves: their rows are not needed
        self.n_nodes += 2 * n_split
        self.layer_nodes, self.layer_left, self.layer_right = nodes, left, right
        self.frontier = [
            c for pair in zip(left.tolist(), right.tolist(), strict=True) for c in pair
        ]
        self.parent_lookups, self.lookups = self.lookups, {}
        if grow and n_split == 0:
            raise reject(peer, "asked to grow a layer without splits")
        return grow

    async def _layer(self) -> None:
        """Children histograms (smaller built; sibling derived by the guest or subtracted),
        packages sent when ready."""
        h = self.h
        sampled = self.rows_of
        if self.in_sample is not None:
            sampled = {c: rows[self.in_sample[rows]] for c, rows in sampled.items()}
        counts = np.zeros(self.n_nodes, dtype=np.int64)
        for child, rows in sampled.items():
            counts[child] = rows.size
        if not self.derive:  # derived trees keep no histogram: nothing to drop
            await h.shards.each(k.shard_retain, self.layer_nodes.tolist())
        splits = []
        for node, left, right in zip(
            self.layer_nodes.tolist(),
            self.layer_left.tolist(),
            self.layer_right.tolist(),
            strict=True,
        ):
            small, big = (left, right) if counts[left] <= counts[right] else (right, left)
            splits.append((node, small, big))
        if self.capacity is not None and not self.derive:
            # The largest first: they keep the most worth keeping.
            splits.sort(key=lambda split: -int(counts[split[1]] + counts[split[2]]))
        # Derived children need no histogram kept (their sums are the guest's to derive).
        keep = [(False, False)] * len(splits) if self.derive else self._keep(splits, counts)
        # The shards run each one's tasks in order: splits go in in this order, SPLITS_AHEAD
        # at a time, so what they hold follows the plan of _keep.
        ahead = [asyncio.Event() for _ in range(len(splits) + SPLITS_AHEAD)]
        for event in ahead[:SPLITS_AHEAD]:
            event.set()

        async def pair(i: int) -> None:
            node, small, big = splits[i]
            rows = sampled[small]
            derive = self.derive
            cached = node in self.cached or derive
            big_rows = None if cached else sampled[big]
            masks = (self.node_features.get(small), self.node_features.get(big))
            await ahead[i].wait()
            try:
                results = await h.shards.each(
                    k.shard_split, node, small, big, rows, masks, keep[i], big_rows, derive
                )
            finally:
                ahead[i + SPLITS_AHEAD].set()
            if derive:  # the small child's package first: the big one names its ids
                await self._send_package(small, [r[0] for r in results])
                await self._send_derived(big, node, small, results[0][1])
                return
            await gather_or_cancel(
                self._send_package(small, [r[0] for r in results]),
                self._send_package(big, [r[1] for r in results]),
            )

        await gather_or_cancel(*(pair(i) for i in range(len(splits))))
        self.cached = {
            child
            for (_, small, big), (ks, kb) in zip(splits, keep, strict=True)
            for child, kept in ((small, ks), (big, kb))
            if kept
        }


def _sample_counts(codes: npt.NDArray[Any], sample: I64, n_slots: int) -> I64:
    """Rows per (feature, slot) of the ``sample`` rows of ``codes`` (rows, features)."""
    return node_counts(codes[sample], n_slots)


def _random_order(n: int) -> I64:
    """A uniformly random permutation of ``range(n)`` from the operating system's CSPRNG.

    Sorting ``n`` random 64-bit keys: uniform but for ties, which have probability below
    ``n**2 / 2**65`` and then keep index order.
    """
    keys = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    return np.argsort(keys, kind="stable").astype(np.int64)


def _random_ids(n: int) -> npt.NDArray[np.uint64]:
    """``n`` distinct random 63-bit ids (redrawn on the rare collision)."""
    while True:
        ids = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(1)
        if np.unique(ids).size == n:
            return ids


def _go_left(codes: npt.NDArray[Any], bin_: int, default_left: bool, missing_bin: int) -> B8:
    return np.asarray((codes <= bin_) | ((codes == missing_bin) & default_left))
