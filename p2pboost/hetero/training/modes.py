"""Vertical training modes as feature schedules: which party's features a round, or a depth,
may split on.

The SecureBoost papers' modes differ from the standard protocol only in *which candidates a
choice ranges over*; so each is a schedule that the core takes as well (``train(
features_by_round=..., features_by_depth=...)``), and a federated run in a mode grows the
core's trees in that mode on the joined data, by construction and by test:

* ``complete_secure = k`` (RL-SecureBoost): the first ``k`` rounds use the guest's features.
* ``tree_num_per_party = k`` (SecureBoost+'s *mix* mode): the parties take turns, ``k`` rounds
  each, guest first, then every host in order; a round uses only its party's features. A guest
  round is local (the hosts get an empty feature mask and nothing else); a host's round is
  the standard protocol with that host alone, the guest choosing among its candidates only.
* ``host_depth``/``guest_depth`` (SecureBoost+'s *layered* mode): the first ``host_depth``
  layers of every tree split on the hosts' features (all hosts' candidates compete), the
  next ``guest_depth`` on the guest's, locally: the hosts leave the tree after the last host
  layer.

A party whose features a round may not use takes no part in its tree (no gradients, no
packages, no partitions). ``complete_secure`` applies first; it combines with either mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.hetero.config import check_modes

__all__ = ["FeatureSchedule", "guest_only_rounds"]

B8 = npt.NDArray[np.bool_]
Mask = Callable[[int], B8 | None]


@dataclass(frozen=True, slots=True)
class FeatureSchedule:
    """The schedule of a vertical run over feature ``blocks`` (guest's count first, then each
    host's, in the global feature order)."""

    blocks: tuple[int, ...]
    complete_secure: int = 0
    tree_num_per_party: int = 0
    host_depth: int = 0
    guest_depth: int = 0

    def __post_init__(self) -> None:
        check_modes(
            self.complete_secure, self.tree_num_per_party, self.host_depth, self.guest_depth
        )

    def _mask(self, parties: Sequence[int]) -> B8:
        edges = np.cumsum((0, *self.blocks))
        mask = np.zeros(int(edges[-1]), dtype=np.bool_)
        for p in parties:
            mask[edges[p] : edges[p + 1]] = True
        return mask

    def by_round(self) -> Mask | None:
        """``features_by_round`` of the round loop (None: every round uses every feature)."""
        if self.complete_secure <= 0 and self.tree_num_per_party <= 0:
            return None
        guest = self._mask([0])
        turns = [self._mask([p]) for p in range(len(self.blocks))]
        first, per = self.complete_secure, self.tree_num_per_party

        def mask(round_: int) -> B8 | None:
            if round_ < first:
                return guest
            if per > 0:
                return turns[(round_ // per) % len(turns)]
            return None

        return mask

    def by_depth(self) -> Mask | None:
        """``features_by_depth`` of the growers (None: every depth uses every feature)."""
        if self.host_depth <= 0:
            return None
        hosts = self._mask(range(1, len(self.blocks)))
        guest = self._mask([0])
        top = self.host_depth
        return lambda depth: hosts if depth < top else guest

    def guest_by_depth(self) -> Mask | None:
        """:meth:`by_depth` restricted to the guest's own features (its grower's mask)."""
        full = self.by_depth()
        if full is None:
            return None
        n_guest = self.blocks[0]

        def mask(depth: int) -> B8 | None:
            m = full(depth)
            return None if m is None else m[:n_guest]

        return mask

    @property
    def host_layers(self) -> int | None:
        """How many layers of a tree the hosts take part in (None: all of them)."""
        return self.host_depth if self.host_depth > 0 else None


def guest_only_rounds(rounds: int, n_guest: int, n_features: int) -> Mask | None:
    """``complete_secure``: the first ``rounds`` rounds may split on the guest's features
    only (the first ``n_guest`` of ``n_features``, guest first), later ones on all; the same
    function, given to the core's ``train(features_by_round=...)``, grows the same trees on
    the joined data."""
    return FeatureSchedule((n_guest, n_features - n_guest), complete_secure=rounds).by_round()
