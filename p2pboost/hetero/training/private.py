"""A differentially private tree's split choice on the vertical guest (pure: no I/O).

The exponential mechanism must range over a fixed set of candidates and draw its noise in an
order that does not depend on the data (:mod:`p2pboost.gbdt.privacy`). So in a private run
every host offers *every* candidate of its fixed grid at every node (``Setup.private``), and
the guest draws one Gumbel variable per candidate: its own candidates first, in the core's
(feature, bin, direction) order, then each host's in the order of its package. Hosts shuffle
that order as always; with a test noise seed they keep the core's order, and the guest's draws
then fall on the same candidates as the core's on the joined data (the tests compare tree for
tree). Either way each candidate gets an independent draw, so the choice has the mechanism's
distribution; only a replay needs the order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.gbdt.grower import Frontier
from p2pboost.gbdt.privacy import PrivateTree, split_scores
from p2pboost.gbdt.split import LayerSplits
from p2pboost.hetero.model import GUEST

__all__ = ["HostCandidates", "PrivateChoice", "choose_private"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class HostCandidates:
    """One host's decrypted left sums, per frontier node ``(m, 1)`` each, package order."""

    owner: int
    sums: Sequence[tuple[F64, F64]]


@dataclass(frozen=True, slots=True, eq=False)
class PrivateChoice:
    """Per node: the owner of the chosen candidate (:data:`GUEST`, a host number, or -1 for
    none) and its position in that host's package; ``own`` holds the guest's chosen splits
    (feature, bin, direction and left sums where the guest owns the choice)."""

    own: LayerSplits
    owner: I64
    position: I64


def choose_private(
    privacy: PrivateTree,
    frontier: Frontier,
    own: tuple[F64, F64, F64, I64],
    hosts: Sequence[HostCandidates],
    grid: tuple[int, ...],
) -> PrivateChoice:
    """The exponential mechanism over the guest's candidates (``own``: the output of
    :meth:`~p2pboost.gbdt.privacy.PrivateTree.layer_scores`, over a ``grid`` of
    ``(features, bins)``) and every host's, in that order."""
    scores, gl, hl, where = own
    k, lam = frontier.nodes.size, privacy.reg_lambda
    blocks, sizes = [scores], [(GUEST, int(scores.shape[1]))]
    for host in hosts:
        m = len(host.sums[0][0]) if host.sums else 0
        rows = [
            split_scores(g, h, frontier.grad[i : i + 1], frontier.hess[i : i + 1], lam)
            for i, (g, h) in enumerate(host.sums)
        ]
        blocks.append(np.stack(rows).reshape(k, m) if rows else np.empty((k, 0)))
        sizes.append((host.owner, m))
    best = privacy.choose(np.hstack(blocks))
    owner = np.full(k, -1, dtype=np.int64)
    position = np.zeros(k, dtype=np.int64)
    feature, threshold = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    default_left = np.zeros(k, dtype=np.bool_)
    left_grad, left_hess = np.zeros((k, 1)), np.zeros((k, 1))
    for i, b in enumerate(best.tolist()):
        if b < 0:
            continue
        for who, size in sizes:
            if b < size:
                owner[i], position[i] = who, b
                break
            b -= size
        if owner[i] == GUEST:
            f, t, d = np.unravel_index(int(where[b]), (grid[0], grid[1], 2))
            feature[i], threshold[i], default_left[i] = f, t, d == 0
            left_grad[i, 0], left_hess[i, 0] = gl[i, b], hl[i, b]
    splits = LayerSplits(
        gain=np.zeros(k),
        feature=feature,
        threshold=threshold,
        default_left=default_left,
        left_grad=left_grad,
        left_hess=left_hess,
        left_count=np.full(k, -1, dtype=np.int64),
    )
    return PrivateChoice(splits, owner, position)
