"""Defences against label inference from instance spaces, decided by the guest alone.

A host that takes part in a tree learns which rows share each node (docs/explanation/
leakage.md); given the labels of a few rows it labels the rest by the nodes they share (the
instance-clustering attack, ``python -m benchmarks attacks``). How much a tree's partition
reveals depends on how well its leaves separate the rows' gradients, which for a logistic
loss are the labels themselves in the first tree (``g = p0 - y``) and the residuals ``p - y``
later. The guest, which holds the labels and grows every tree, can measure that on its own
trees before any host sees one.

:class:`PurityGate` (``HeteroConfig.purity_bound``): the rounds are guest-only (the hosts get
an empty feature mask and nothing else, as under ``complete_secure``) until the *gradient
purity* of the guest's own last tree falls below the bound; from the next round on the mode's
schedule applies (every party, or mix mode's turns). The gradient purity of a tree over the
rows it grew on is

    purity = sum over leaves |sum of g in the leaf| / sum over rows |g|

(first output's gradients; 1 when every leaf holds gradients of one sign only, i.e. rows of
one label in a first logistic tree; 0 when every leaf's gradients cancel). It is the share of
the gradients' mass a partition separates, which is what the attack reads: it falls as the
model fits (give_credit30k: 0.45, 0.28, 0.22, 0.16, ... over the first guest-only trees;
default_credit: 0.32, 0.24, 0.18, ...), where the share of rows in their leaf's majority
class (:func:`~p2pboost.gbdt.metrics.leaf_purity`) hardly moves on unbalanced labels. The
gate measures the guest's tree, grown on the guest's features only; a tree the hosts had
joined would split at least as well, so the bound is a guide, chosen by measurement
(benchmarks/README.md, ``attacks``), not a guarantee.

In layered mode a closed gate's trees grow on the guest's features at every depth (as
``complete_secure``'s do not: their host layers stay empty). The hosts need not know: a
guest-only round looks to them like a ``complete_secure`` round.
``complete_secure`` rounds come first, the gate's after them. A resumed run measures again
from its first new round (the gate is closed until one of its own trees passes), which can
only add guest-only rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.training.modes import FeatureSchedule

__all__ = ["PurityGate", "gradient_purity", "purity_gate"]

B8 = npt.NDArray[np.bool_]
Mask = Callable[[int], B8 | None]


def gradient_purity(grad: npt.ArrayLike, positions: npt.ArrayLike) -> float:
    """The share of the gradients' absolute mass the leaves separate (module docstring):
    ``grad`` per row (the first column of a matrix), ``positions`` each row's leaf (rows at a
    negative position, outside the tree's sample, are left out)."""
    g = np.asarray(grad, dtype=np.float64)
    g = g.reshape(g.shape[0], -1)[:, 0]
    leaf = np.asarray(positions, dtype=np.int64).ravel()
    inside = leaf >= 0
    g, leaf = g[inside], leaf[inside]
    total = float(np.abs(g).sum())
    if total == 0.0:
        return 0.0
    _, index = np.unique(leaf, return_inverse=True)
    return float(np.abs(np.bincount(index, weights=g)).sum() / total)


class PurityGate:
    """``features_by_round`` of a run whose first rounds stay guest-only until the guest's
    tree's gradient purity falls below ``bound``; then ``inner`` (the mode's schedule: None
    lets every feature in). ``guest`` is the guest's feature mask over all features.

    The round loop asks for a round's mask when the round starts and :meth:`observe` is given
    each tree as it is grown, so the decision for round ``r + 1`` uses round ``r``'s tree.
    """

    def __init__(self, bound: float, guest: B8, inner: Mask | None, first: int = 0) -> None:
        self.bound = bound
        self.guest = guest
        self.inner = inner
        self.first = first  # complete_secure's rounds: guest-only whatever the purity
        self.open = False
        self.purities: list[float] = []  # the gate's measurements, one per guest-only tree

    def __call__(self, round_: int) -> B8 | None:
        if not self.open:
            return self.guest
        return None if self.inner is None else self.inner(round_)

    def observe(self, round_: int, grad: npt.ArrayLike, positions: npt.ArrayLike) -> None:
        """A tree of ``round_`` was grown: while the gate is closed, measure it."""
        if self.open:
            return
        purity = gradient_purity(grad, positions)
        self.purities.append(round(purity, 6))
        if round_ + 1 >= self.first and purity < self.bound:
            self.open = True

    def by_depth(self, inner: Mask | None) -> Mask | None:
        """The guest grower's ``features_by_depth``: while the gate is closed a tree is the
        guest's alone and grows on its features at every depth (in layered mode too, whose
        top layers would otherwise be the hosts' and leave a guest-only tree a single leaf);
        then ``inner``, the mode's."""
        if inner is None:
            return None
        return lambda depth: inner(depth) if self.open else None

    @property
    def guest_only_rounds(self) -> int:
        """Rounds the gate kept from the hosts so far."""
        return len(self.purities)

    def diagnostics(self) -> dict[str, float]:
        """What the model's diagnostics keep of the gate: the bound, the guest-only rounds and
        the last purity measured (a label statistic, of the guest's own trees)."""
        last = self.purities[-1] if self.purities else float("nan")
        return {
            "purity_bound": self.bound,
            "purity_guest_only_rounds": float(self.guest_only_rounds),
            "purity_last_guest_tree": last,
        }


def purity_gate(
    config: HeteroConfig, schedule: FeatureSchedule, private: bool = False
) -> PurityGate | None:
    """The run's gate (``config.purity_bound`` over the mode's ``schedule``), or None when
    the bound is off. A differentially private run (``private``) refuses it: when the hosts
    join depends on a label statistic no privacy accountant counts."""
    if config.purity_bound <= 0.0:
        return None
    if private:
        raise InputError(
            "purity_bound decides from the labels when the hosts join, which the privacy "
            "accountant of a dp run does not count: leave purity_bound at 0 with dp"
        )
    n = sum(schedule.blocks)
    guest = np.zeros(n, dtype=np.bool_)
    guest[: schedule.blocks[0]] = True
    inner = replace(schedule, complete_secure=0).by_round()
    return PurityGate(config.purity_bound, guest, inner, first=schedule.complete_secure)
