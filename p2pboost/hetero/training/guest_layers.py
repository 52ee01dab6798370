"""The guest's side of a tree's layers: splits chosen with the hosts, their decisions, the
partitions.

Per layer the core's grower (:class:`~p2pboost.gbdt.grower.TreeGrower`) asks three things,
and :class:`TreeLayers` answers them with the hosts' help:

* **choose splits** (the core's split-choice hook): the guest's own best split per node
  (the core's :meth:`~p2pboost.gbdt.grower.HistogramGrower.find_splits`) competes with every
  host's candidates, decrypted as their packages arrive (a derived package's sums are its
  parent's minus its sibling's) and scored with the core's
  :func:`~p2pboost.gbdt.split.split_gains` and validity rules under the core's tie-break; the
  owners of winning host candidates resolve ties and return the left sets (a private tree
  chooses by :func:`~p2pboost.hetero.training.private.choose_private` instead);
* **partition**: the guest's own splits move its rows (the core's ``partition_rows``), host
  splits move them by the owners' bitmaps, and every host is told the layer: a host whose
  own answers are all the layer lacks is told it right behind the question, before it
  answers (the layer leaves its own left sets out), so it starts the next layer's
  histograms a round trip sooner; the others once every owner has answered;
* **child histograms**: the guest's own, by the core (the hosts build theirs).

In layered mode the layers below the hosts' run on the guest's features alone, locally. The
tree's start and its gradient stream are :mod:`p2pboost.hetero.training.guest_tree`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.packing import PackingSpec
from p2pboost.exceptions import CodecError, CryptoError
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.gbdt.grower import (
    ChooseSplits,
    Frontier,
    GrowStep,
    LayerPlan,
    Partition,
    TreeGrower,
    partition_rows,
)
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import PrivateTree
from p2pboost.gbdt.rounds import EvalData
from p2pboost.gbdt.split import LayerSplits, accepted
from p2pboost.hetero._messages import U8, Decide, Decided, Derived, Layer, Package
from p2pboost.hetero.model import GUEST
from p2pboost.hetero.training.common import B8, I64, GuestPhase, Progress, unpack_bitmap
from p2pboost.hetero.training.constraints import GuestConstraints, NodeRules, score_host_candidates
from p2pboost.hetero.training.packages import OpenPackage, check_package, derive, open_package
from p2pboost.hetero.training.private import HostCandidates, choose_private
from p2pboost.net.node import Channel
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = ["HostLink", "Trainer", "TreeLayers"]


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
class _Ahead:
    """A layer worked out before the owners answer (:meth:`TreeLayers._ahead`): the split
    nodes and their children, every row's node after the guest's own splits, those splits'
    left sets (node -> bitmap over its rows), whether another layer follows, and the
    children's column draws."""

    nodes: I64
    left: I64
    right: I64
    positions: I64
    bitmaps: dict[int, U8]
    grow: bool
    draws: npt.NDArray[np.bool_] | None


@dataclass(frozen=True, slots=True, eq=False)
class _Moves:
    """Where the guest's own best split of each frontier node would send the node's rows
    (:meth:`TreeLayers._moves`): node -> its rows, and which of them go left."""

    rows: dict[int, I64]
    left: dict[int, B8]


class Trainer(Protocol):
    """What a tree's layers read of the guest's trainer
    (:class:`~p2pboost.hetero.training.guest_tree.GuestTrainer`)."""

    params: BoostParams
    engine: CryptoEngine
    links: list[HostLink]
    evals: list[EvalData]
    progress: Progress
    host_layers: int | None
    host_slices: list[slice]
    constraints: GuestConstraints | None


class TreeLayers:
    """One tree's layers on the guest side: the grower's split choice, partition and child
    histogram steps answered with the hosts (the module docstring)."""

    def __init__(
        self,
        trainer: Trainer,
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
        #: The layer being decided, worked out ahead, and the hosts already told it.
        self.ahead: _Ahead
        self.told: set[int] = set()
        #: Where the guest's own splits of the layer being chosen would send their rows.
        self.moves: _Moves | None = None

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
        self.moves = None
        if self.grower.privacy is not None:
            own, packages, winners = await self._choose_private(frontier, self.grower.privacy)
        else:
            own, packages = await gather_or_cancel(
                asyncio.to_thread(self._own_splits, frontier),
                self._receive_layer(frontier),
            )
            winners = self._choose(frontier, own, packages)
        self.t.progress.enter(GuestPhase.DECIDE, frontier.depth)
        gain = np.array([w.gain for w in winners], dtype=np.float64)
        accept = accepted(gain, self.t.params).tolist()
        owner = np.array([w.owner for w in winners], dtype=np.int64)
        host = owner != GUEST
        self.chosen = await self._decide(frontier, own, winners, accept)
        left_grad, left_hess = own.left_grad.copy(), own.left_hess.copy()
        # Each split's feature in the joined order of the constraints (a host's: its token).
        global_feature = np.where(host, -1, own.feature)
        for i in accept:
            if host[i]:
                node = int(frontier.nodes[i])
                pkg = packages[(winners[i].owner, node)]
                pos = int(np.flatnonzero(pkg.ids == np.uint64(self.chosen[node][0]))[0])
                left_grad[i], left_hess[i] = pkg.grad[pos], pkg.hess[pos]
                if pkg.tokens is not None:
                    start = self.t.host_slices[winners[i].owner - 1].start
                    global_feature[i] = start + int(pkg.tokens[pos])
        return LayerSplits(
            gain=gain,
            feature=np.where(host, -1, own.feature),
            threshold=np.where(host, -1, own.threshold),
            default_left=own.default_left & ~host,
            left_grad=left_grad,
            left_hess=left_hess,
            left_count=np.full(gain.size, -1, dtype=np.int64),
            owner=owner,
            global_feature=global_feature,
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
                problem = self._check_tokens(link, msg)
                if problem is not None:
                    raise reject(link.name, problem)
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

    def _check_tokens(self, link: HostLink, msg: Package) -> str | None:
        """What is wrong with a package's feature tokens (asked for or not), or None."""
        c = self.t.constraints
        asked = c is not None and c.tokens[link.index - 1]
        if msg.tokens is None:
            return "package without the feature tokens asked for" if asked else None
        if not asked:
            return "package with feature tokens that were not asked for"
        if msg.tokens.size and int(msg.tokens.max()) >= link.n_features:
            return "a feature token beyond the host's features"
        return None

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
        tokens = None if msg.tokens is None else msg.tokens.astype(np.int64)
        return open_package(msg.ids, msg.counts, g_int, h_int, self.grids, tokens)

    def _choose(
        self, frontier: Frontier, own: LayerSplits, packages: dict[tuple[int, int], OpenPackage]
    ) -> list[_Winner]:
        """Per node, the core's choice between the guest's best and each host's candidates."""
        p = self.t.params
        state = self.grower.state  # the nodes' bounds and path features under constraints
        monotone = None if state is None else state.nodes(frontier.nodes)
        allowed = None if state is None else state.features(frontier.nodes)
        winners = []
        for i, node in enumerate(frontier.nodes.tolist()):
            best = _Winner(GUEST, float(own.gain[i]))
            G, H = frontier.grad[i : i + 1], frontier.hess[i : i + 1]
            for link in self.links:
                pkg = packages[(link.index, node)]
                if len(pkg.ids) == 0:
                    continue
                rules = None
                if state is not None:
                    rules = NodeRules(
                        None
                        if monotone is None
                        else replace(
                            monotone,
                            weight=monotone.weight[i],
                            lower=monotone.lower[i],
                            upper=monotone.upper[i],
                        ),
                        None if allowed is None else allowed[i],
                        self.t.host_slices[link.index - 1].start,
                    )
                # The core's gains and validity rules (min_child_weight for every output,
                # min_samples_leaf on counts, the constraints).
                gains = score_host_candidates(
                    pkg.grad,
                    pkg.hess,
                    pkg.counts,
                    pkg.tokens,
                    G,
                    H,
                    int(frontier.count[i]),
                    p,
                    rules,
                )
                top = float(gains.max())
                # Strictly greater: on equal gains the earlier party (lower feature index) wins.
                if top > best.gain or (np.isnan(best.gain) and not np.isnan(top)):
                    best = _Winner(link.index, top, pkg.ids[gains == top])
            winners.append(best)
        return winners

    async def _decide(
        self, frontier: Frontier, own: LayerSplits, winners: list[_Winner], accept: list[int]
    ) -> dict[int, tuple[int, B8]]:
        """Ask each owner to resolve its winning ids: node -> (chosen id, left bitmap).

        While the owners answer, the layer is worked out (:meth:`_ahead`) and sent to every
        host whose own answers are all it lacks (no other host owns a split of the layer),
        leaving those out: such a host starts the next layer's histograms as soon as it has
        answered, a round trip (an answer, the guest's partition, a layer) sooner."""
        by_host: dict[int, list[int]] = {}
        for i in accept:
            if winners[i].owner != GUEST:
                by_host.setdefault(winners[i].owner, []).append(i)
        counts = np.bincount(self.grower.positions, minlength=self.grower.tree.n_nodes)
        asked = {k: self.t.links[k - 1] for k in sorted(by_host)}
        questions = {
            k: Decide(frontier.nodes[idx].astype(np.int64), self._ids(winners, idx))
            for k, idx in by_host.items()
        }
        await gather_or_cancel(*(send(link.ctl, questions[k]) for k, link in asked.items()))
        if self.moves is not None:  # the rows' moves are at hand: a few array copies
            self.ahead = self._ahead(frontier, own, winners, accept)
        else:
            self.ahead = await asyncio.to_thread(self._ahead, frontier, own, winners, accept)
        early = [lk for lk in self.links if not set(by_host) - {lk.index}]
        await gather_or_cancel(*(send(lk.ctl, self._early(lk)) for lk in early))
        self.told = {lk.index for lk in early}

        async def answer(k: int, link: HostLink) -> dict[int, tuple[int, B8]]:
            idx = by_host[k]
            nodes = frontier.nodes[idx].astype(np.int64)
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

        parts = await gather_or_cancel(*(answer(k, link) for k, link in asked.items()))
        return {k: v for part in parts for k, v in part.items()}

    @staticmethod
    def _ids(winners: list[_Winner], idx: list[int]) -> list[npt.NDArray[np.uint64]]:
        """The ids tied at the best gain of each of the nodes ``idx`` (all won by one host)."""
        return [tied for i in idx if (tied := winners[i].tied) is not None]

    def _own_splits(self, frontier: Frontier) -> LayerSplits:
        """The guest's best split per node (the core's), and where each would send the node's
        rows (:meth:`_moves`), worked out while the hosts' packages are decrypted."""
        own = self.grower.find_splits(frontier)
        self.moves = self._moves(frontier, own)
        return own

    def _moves(self, frontier: Frontier, own: LayerSplits) -> _Moves:
        """Where the guest's own best split of every frontier node would send its rows (the
        core's :func:`~p2pboost.gbdt.grower.partition_rows`, under stand-in child numbers),
        whether or not it wins: the winners' left sets are then at hand when the layer is
        known, instead of being worked out between the question and the layer."""
        grower, old = self.grower, self.grower.positions
        # A guest that holds no feature has no split anywhere (the core still names feature 0).
        has = (own.feature >= 0) & (grower.data.n_features > 0)
        nodes = frontier.nodes[has].astype(np.int64)
        left = grower.tree.n_nodes + 2 * np.arange(nodes.size, dtype=np.int64)
        new = partition_rows(
            grower.data,
            old,
            nodes,
            own.feature[has],
            own.threshold[has],
            own.default_left[has],
            left,
            left + 1,
            grower.tree.n_nodes,
        )
        rows = {int(node): np.flatnonzero(old == node) for node in nodes.tolist()}
        return _Moves(rows, {node: new[r] == left[j] for j, (node, r) in enumerate(rows.items())})

    def _ahead(
        self, frontier: Frontier, own: LayerSplits, winners: list[_Winner], accept: list[int]
    ) -> _Ahead:
        """The layer as the core will plan it (:meth:`~p2pboost.gbdt.grower.HistogramGrower.
        apply_splits`: the accepted nodes in frontier order, children numbered in pairs after
        the tree's nodes; another layer unless none split or the children are at the depth
        limit or below the hosts' layers), with the guest's own splits' rows moved by the
        core's :func:`~p2pboost.gbdt.grower.partition_rows` and their left sets; checked
        against the core's plan in :meth:`_partition`."""
        grower = self.grower
        idx = np.asarray(accept, dtype=np.int64)
        nodes = frontier.nodes[idx].astype(np.int64)
        left = grower.tree.n_nodes + 2 * np.arange(idx.size, dtype=np.int64)
        right = left + 1
        # A private tree's own splits come with the hosts' packages: worked out now.
        if self.moves is None:
            self.moves = self._moves(frontier, own)
        moves = self.moves
        new, bitmaps = grower.positions.copy(), {}
        for j, node in enumerate(nodes.tolist()):
            if winners[accept[j]].owner == GUEST:
                rows, go_left = moves.rows[node], moves.left[node]
                new[rows] = np.where(go_left, left[j], right[j])
                bitmaps[node] = np.packbits(go_left)
        depth = frontier.depth
        grow = idx.size > 0 and depth + 1 < self.t.params.max_depth and not self._local(depth + 1)
        # The next depth's column draws, early, so each host knows its children's (the core's
        # draws: nothing draws in between).
        columns = grower.columns
        draws = columns.ahead(2 * idx.size) if grow and columns is not None else None
        return _Ahead(nodes, left, right, new, bitmaps, grow, draws)

    def _layer_for(
        self, link: HostLink, bitmaps: list[U8], decided: npt.NDArray[np.int64] | None = None
    ) -> Layer:
        """The layer as ``link`` gets it: its own column draws, the left sets given."""
        a = self.ahead
        features = (
            []
            if a.draws is None
            else [d[self.t.host_slices[link.index - 1]].astype(np.uint8) for d in a.draws]
        )
        msg = Layer(a.nodes, a.left, a.right, bitmaps, a.grow, features)
        return msg if decided is None else replace(msg, decided=decided)

    def _early(self, link: HostLink) -> Layer:
        """The layer for a host whose own answers are all it lacks: those left out."""
        a = self.ahead
        empty = np.zeros(0, dtype=np.uint8)
        bitmaps = [a.bitmaps.get(n, empty) for n in a.nodes.tolist()]
        decided = np.array([n for n in a.nodes.tolist() if n not in a.bitmaps], dtype=np.int64)
        return self._layer_for(link, bitmaps, decided)

    async def _partition(self, plan: LayerPlan, grow: bool) -> None:
        """New positions from the guest's own splits (moved ahead) and the owners' bitmaps;
        tell the hosts that have not had the layer yet."""
        a, grower = self.ahead, self.grower
        if not (
            np.array_equal(plan.nodes, a.nodes)
            and np.array_equal(plan.left, a.left)
            and np.array_equal(plan.right, a.right)
            and grow == a.grow
            and np.array_equal(plan.local, np.isin(a.nodes, list(a.bitmaps)))
        ):
            raise RuntimeError("the core planned the layer other than the guest worked it out")
        # Every frontier node's rows were found with the guest's moves (a guest with features).
        found = {} if self.moves is None else self.moves.rows
        old, new = grower.positions, a.positions  # the layer's own array, not shared
        bitmaps = []
        self.family = {}
        for j, node in enumerate(plan.nodes.tolist()):
            left, right = int(plan.left[j]), int(plan.right[j])
            self.family[left], self.family[right] = (node, right), (node, left)
            if node in a.bitmaps:
                bitmaps.append(a.bitmaps[node])
                continue
            rows = found[node] if node in found else np.flatnonzero(old == node)
            go_left = self.chosen[node][1]
            new[rows] = np.where(go_left, left, right)
            bitmaps.append(np.packbits(go_left))
        grower.positions = new
        late = [lk for lk in self.links if lk.index not in self.told]
        await gather_or_cancel(*(send(lk.ctl, self._layer_for(lk, bitmaps)) for lk in late))
