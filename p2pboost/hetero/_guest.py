"""The guest's side of one tree: encrypt and stream gradients, score, decide, partition.

:class:`GuestTrainer` drives the plaintext core's :class:`~p2pboost.gbdt.grower.TreeGrower`
for the guest's own features (root and child histograms, its best split per node) and adds
the hosts' candidates: it decrypts each package as it arrives, scores it with the core's
:func:`~p2pboost.gbdt.split.split_gains` and validity rules, and applies the core's
tie-break across parties. Children, leaf weights and positions are made exactly as the
core's ``apply_splits``/``partition`` make them. The protocol and its messages are described
in :mod:`p2pboost.hetero.train`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import secrets
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.compress import SplitInfoPackage, decompress_split_infos
from p2pboost.crypto.engine import PaillierEngine
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.crypto.paillier import (
    CiphertextBatch,
)
from p2pboost.exceptions import (
    CodecError,
    CryptoError,
    KeyMismatchError,
    RemoteProtocolError,
)
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.booster import EvalData, refit_leaves
from p2pboost.gbdt.fixedpoint import Grid, choose_grid, from_fixed, quantize, to_fixed
from p2pboost.gbdt.grower import Frontier, LayerPlan, TreeGrower, partition_rows
from p2pboost.gbdt.histogram import make_builder
from p2pboost.gbdt.objectives import Objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.split import MIN_GAIN, LayerSplits, candidate_mask, leaf_weight, split_gains
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero._common import (
    B8,
    F64,
    I64,
    GuestPhase,
    HeteroConfig,
    Progress,
    array_field,
    expect,
    grid_wire,
    int_field,
    list_field,
    offload,
    packing_spec,
    unpack_bitmap,
)
from p2pboost.hetero.model import GUEST, GuestTree, add_tree, walk
from p2pboost.net.node import Channel
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = [
    "GuestTrainer",
    "HostLink",
    "model_fingerprint",
    "prediction",
]


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


def model_fingerprint(trees: Sequence[GuestTree]) -> str:
    """Shared model id: a random nonce and the public shape of the trees."""
    h = hashlib.sha256(b"p2pboost/hetero/model/v1" + secrets.token_bytes(16))
    for tree in trees:
        for arr in (tree.owner, tree.left, tree.right):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    return h.hexdigest()[:32]


def prediction(objective: Objective, margin: F64) -> F64:
    out = objective.transform(margin)
    return out[:, 0] if out.shape[1] == 1 else out


@dataclass
class GuestTrainer:
    """The guest's state across trees; :meth:`grow` runs the protocol for one tree."""

    params: BoostParams
    objective: Objective
    config: HeteroConfig
    pool: Executor
    engine: PaillierEngine
    links: list[HostLink]
    mapper: BinMapper
    data: BinnedData
    y: F64
    margin: F64
    evals: list[EvalData]
    progress: Progress

    def __post_init__(self) -> None:
        p = self.params
        self.builder = make_builder(self.data, p.sparse_aware, with_counts=p.min_samples_leaf > 1)
        self.candidates = candidate_mask(self.mapper.n_bins, p.max_bin)
        offsets = np.cumsum([self.data.n_features] + [lk.n_features for lk in self.links])
        self.host_slices = [slice(int(a), int(b)) for a, b in itertools.pairwise(offsets)]

    async def grow(
        self, tree_id: int, g: F64, h: F64, sample: I64 | None, features: B8, out: int
    ) -> GuestTree:
        """Grow one tree with the hosts; update the training and evaluation margins."""
        self.progress.tree = tree_id
        rows = np.arange(self.data.n_rows) if sample is None else sample
        g_grid, h_grid = choose_grid(g[rows], rows.size), choose_grid(h[rows], rows.size)
        gq, hq = quantize(g, g_grid), quantize(h, h_grid)
        public_key = self.engine.public_key
        spec = packing_spec(int(rows.size), (g_grid, h_grid), public_key)
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
                    "grid": grid_wire(g_grid, h_grid),
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
            tree = _refit_guest(
                self.objective, tree, self.y, self.margin, positions, sample, self.params
            )
        add_tree(self.margin, tree.value[positions], out)
        for i, ev in enumerate(self.evals):
            go_left = tree.guest_decisions_binned(ev.data.codes, ev.data.missing_bin)
            for node, per_set in tree_ctx.eval_bits.items():
                go_left[node] = per_set[i]
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
            planes = await offload(self.pool, pack, spec, gi[sl], hi[sl])
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
    refit = refit_leaves(objective, core, y, margin, positions, sample, params.learning_rate)
    return tree if refit is core else replace(tree, value=refit.value)


class _TreeRound:
    """One tree's layers on the guest side."""

    def __init__(
        self,
        trainer: GuestTrainer,
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
        self, link: HostLink, frontier: Frontier
    ) -> dict[tuple[int, int], _Package]:
        expected = {int(n): i for i, n in enumerate(frontier.nodes.tolist())}
        decrypting: dict[int, asyncio.Future[_Package]] = {}
        try:
            for _ in range(len(expected)):
                msg = expect(await link.info.recv(), "pkg", link.name)
                if int_field(msg, "tree", link.name, 0, 1 << 40) != self.tree_id:
                    raise RemoteProtocolError("package for another tree", peer=link.name)
                node = int_field(msg, "node", link.name, 0, 1 << 40)
                if node not in expected or node in decrypting:
                    raise RemoteProtocolError(f"unexpected package for node {node}", peer=link.name)
                try:
                    pkg = SplitInfoPackage.from_wire(
                        msg.get("pkg"), self.t.engine.public_key, self.spec
                    )
                except (CodecError, KeyMismatchError) as exc:
                    raise RemoteProtocolError(
                        f"bad split-info package: {exc}", peer=link.name
                    ) from None
                node_count = int(frontier.count[expected[node]])
                if pkg.counts.size and pkg.counts.max() > node_count:
                    raise RemoteProtocolError(
                        "split-info count above the node's rows", peer=link.name
                    )
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
            g_int, h_int = await offload(
                self.t.pool, decompress_split_infos, self.spec, plain, pkg.counts
            )
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

        async def ask(link: HostLink, idx: list[int]) -> dict[int, tuple[int, B8]]:
            nodes = frontier.nodes[idx].astype(np.int64)
            ids = [winners[i].tied for i in idx]
            await link.ctl.send({"t": "decide", "nodes": nodes, "ids": ids})
            reply = expect(await link.ctl.recv(), "decided", link.name)
            chosen = array_field(reply, "ids", link.name, np.uint64, (len(idx),))
            bitmaps = list_field(reply, "bitmaps", link.name, len(idx))
            evals = list_field(reply, "eval", link.name, len(idx))
            out = {}
            for j, i in enumerate(idx):
                tied = winners[i].tied
                assert tied is not None
                if chosen[j] not in tied:
                    raise RemoteProtocolError("chose an id that was not offered", peer=link.name)
                node = int(nodes[j])
                out[node] = (
                    int(chosen[j]),
                    unpack_bitmap(bitmaps[j], int(counts[node]), link.name),
                )
                ev = evals[j]
                if not isinstance(ev, list) or len(ev) != len(self.t.evals):
                    raise RemoteProtocolError("evaluation bits per set expected", peer=link.name)
                self.eval_bits[node] = [
                    unpack_bitmap(b, e.y.size, link.name)
                    for b, e in zip(ev, self.t.evals, strict=True)
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
