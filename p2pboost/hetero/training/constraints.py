"""Monotone and interaction constraints in vertical training: who declares what, what crosses
the wire, and how the guest applies the core's rules to the host candidates it decrypts.

The rules are the core's (:mod:`p2pboost.gbdt.constraints`): the guest keeps every node's
bounds and path features (:class:`~p2pboost.gbdt.constraints.TreeConstraints`, inside the
core's grower), scores its own candidates with the core, and scores each host candidate from
its decrypted left sums with the same functions. So a constrained federated model equals the
core's constrained model on the joined data (guest features first, then each host's).

**Who declares.** Each party declares the directions of its own features by name (or by
position over its own features): the guest in ``BoostParams.monotone_constraints``, a host in
``host_train(monotone_constraints=...)`` (its party file's ``[train]`` table). Interaction
groups span parties, and every party is given the same groups (``interaction_constraints``,
lists of feature names): each resolves the names it holds and ignores the others. The guest
checks that every name of every group is held by exactly one party, by counting (a host says
how many of a group's features are its own, never which).

**What crosses the wire.** A host never names a feature. It draws a secret permutation of its
features, their *tokens*, once per session, and says in its hello the direction of each token
and, per group, which tokens belong to it (:class:`~p2pboost.hetero._messages.Hello`). When
the guest needs them (a host with a non-zero direction, or any interaction group), it asks in
its setup (``Setup.tokens``) for each candidate's token in the host's packages. The guest thus
learns the declared directions and group memberships of anonymous features, and which of a
host's candidates share a feature; never a name, a threshold or a bin (the leakage page).

A derived package (a split's larger child) carries no tokens: its candidates are its parent's,
whose tokens the guest holds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.constraints import (
    FeatureConstraints,
    MonotoneNodes,
    has_constraints,
    monotone_split_gains,
    parse_interactions,
    parse_monotone,
    resolve_constraints,
)
from p2pboost.gbdt.params import BoostParams, MultiStrategy
from p2pboost.gbdt.split import split_gains
from p2pboost.hetero._messages import Hello
from p2pboost.hetero.training.common import B8, F64, I64

__all__ = [
    "GuestConstraints",
    "HostDeclaration",
    "NodeRules",
    "check_guest_constraints",
    "guest_constraints",
    "host_declaration",
    "score_host_candidates",
]

I8 = npt.NDArray[np.int8]
U8 = npt.NDArray[np.uint8]


# -- the host's declaration ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class HostDeclaration:
    """A host's constraints on its own features, by token: ``token[f]`` is feature ``f``'s
    token (a secret permutation, drawn per session); ``directions`` the direction of each
    token (None: none declared); ``groups`` per interaction group the 0/1 membership of each
    token (empty: none declared)."""

    token: I64
    directions: I8 | None
    groups: list[U8]

    def settings(self) -> list[dict[str, list[Any]]]:
        """What was declared, by feature (not by token, which changes every session), for the
        host's checkpoint digest: a resume after changing its constraints is then refused
        like one after changing its data. Empty when nothing is declared, so a host without
        constraints digests exactly what it did before constraints existed."""
        if self.directions is None and not self.groups:
            return []
        monotone = [] if self.directions is None else self.directions[self.token].tolist()
        groups = [g[self.token].tolist() for g in self.groups]
        return [{"monotone": monotone, "interactions": groups}]


def host_declaration(
    monotone: object, interactions: object, names: Sequence[str] | None, n_features: int
) -> HostDeclaration:
    """A host's declaration from its settings: ``monotone`` a mapping of its own feature names
    to -1/0/1 (or one direction per own feature), ``interactions`` the run's groups of feature
    names (names of other parties' features are theirs, and ignored here). Raises
    :class:`InputError` for an unknown own name, a bad direction or a group by position."""
    mono = parse_monotone(monotone)
    groups = parse_interactions(interactions)
    resolved = resolve_constraints(mono, None, n_features, names)
    token = np.argsort(np.frombuffer(os.urandom(8 * n_features), dtype=np.uint64)).astype(np.int64)
    directions = None
    if resolved is not None and resolved.monotone is not None:
        directions = np.zeros(n_features, dtype=np.int8)
        directions[token] = resolved.monotone.astype(np.int8)
    membership: list[U8] = []
    if groups is not None:
        own = {name: f for f, name in enumerate(names or ())}
        for s, group in enumerate(groups):
            if any(not isinstance(m, str) for m in group):
                raise InputError(
                    f"interaction_constraints[{s}] gives a position: in vertical training "
                    "groups name features, since positions mean nothing across parties"
                )
            if own == {} and group:
                raise InputError(
                    "interaction_constraints name features, but this host's features have no "
                    "names (give feature_names)"
                )
            mask = np.zeros(n_features, dtype=np.uint8)
            for member in group:
                if member in own:
                    mask[token[own[str(member)]]] = 1
            membership.append(mask)
    return HostDeclaration(token, directions, membership)


# -- the guest's view ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GuestConstraints:
    """The run's constraints as the guest applies them: ``features`` over the guest's features
    then every host's tokens (in host order), and ``tokens[k]`` whether host ``k + 1``'s
    packages carry tokens."""

    features: FeatureConstraints
    tokens: list[bool]


def check_guest_constraints(params: BoostParams, names: Sequence[str] | None, n_guest: int) -> None:
    """What the guest can check of the constraints before any host is contacted: its own
    directions against its own features, groups by name, and no ``dp``. Raises
    :class:`InputError` naming the setting."""
    resolve_constraints(params.monotone_constraints, None, n_guest, names)
    for s, group in enumerate(params.interaction_constraints or ()):
        if any(not isinstance(m, str) for m in group):
            raise InputError(
                f"interaction_constraints[{s}] gives a position: in vertical training "
                "groups name features, since positions mean nothing across parties"
            )
    if params.dp is not None and has_constraints(
        params.monotone_constraints, params.interaction_constraints
    ):
        raise InputError(_NO_DP)


_NO_DP = (
    "vertical training with dp does not apply monotone_constraints or "
    "interaction_constraints: train without dp, or without the constraints"
)


def guest_constraints(
    params: BoostParams,
    names: Sequence[str] | None,
    n_guest: int,
    hosts: Sequence[str],
    hellos: Sequence[Hello],
) -> GuestConstraints | None:
    """The run's constraints from the guest's parameters and every host's hello (already
    checked for shape by the message), or None when nothing is constrained. Raises
    :class:`InputError` naming the setting when the parties' declarations do not fit."""
    own = resolve_constraints(params.monotone_constraints, None, n_guest, names)
    guest_mono = np.zeros(n_guest, np.int64)
    if own is not None and own.monotone is not None:
        guest_mono = own.monotone.astype(np.int64)
    host_mono = [
        np.zeros(h.n_features, np.int64) if h.directions is None else h.directions.astype(np.int64)
        for h in hellos
    ]
    monotone = np.concatenate([guest_mono, *host_mono])
    groups = _joined_groups(params, names, n_guest, hosts, hellos)
    if not monotone.any() and groups is None:
        return None
    tokens = [groups is not None or bool(m.any()) for m in host_mono]
    if params.dp is not None:
        raise InputError(_NO_DP)
    if monotone.any() and params.multi_strategy == MultiStrategy.MULTI_OUTPUT_TREE:
        declared = [h for h, m in zip(hosts, host_mono, strict=True) if m.any()]
        raise InputError(
            f"host(s) {', '.join(map(repr, declared))} declare monotone_constraints, which "
            "need one weight per leaf: a vector leaf (multi_strategy='multi_output_tree') "
            "has no single direction; use multi_strategy='one_output_per_tree'"
        )
    return GuestConstraints(
        FeatureConstraints(monotone if monotone.any() else None, groups), tokens
    )


def _joined_groups(
    params: BoostParams,
    names: Sequence[str] | None,
    n_guest: int,
    hosts: Sequence[str],
    hellos: Sequence[Hello],
) -> B8 | None:
    """The interaction groups over the guest's features and every host's tokens."""
    groups = params.interaction_constraints
    if groups is None:
        for host, hello in zip(hosts, hellos, strict=True):
            if hello.groups:
                raise InputError(
                    f"host {host!r} declares interaction_constraints but the guest's params "
                    "have none: give every party the same groups"
                )
        return None
    own = {name: f for f, name in enumerate(names or ())}
    parts = [np.zeros((len(groups), n_guest), dtype=np.bool_)]
    for s, group in enumerate(groups):
        for member in group:
            if not isinstance(member, str):
                raise InputError(
                    f"interaction_constraints[{s}] gives a position: in vertical training "
                    "groups name features, since positions mean nothing across parties"
                )
            if member in own:
                parts[0][s, own[member]] = True
    for host, hello in zip(hosts, hellos, strict=True):
        if hello.groups and len(hello.groups) != len(groups):
            raise InputError(
                f"host {host!r} declares {len(hello.groups)} interaction groups, the guest "
                f"{len(groups)}: give every party the same interaction_constraints"
            )
        if hello.groups:
            parts.append(np.stack([g.astype(np.bool_) for g in hello.groups]))
        else:
            parts.append(np.zeros((len(groups), hello.n_features), dtype=np.bool_))
    joined = np.concatenate(parts, axis=1)
    for s, group in enumerate(groups):
        wanted, held = len(set(group)), int(joined[s].sum())
        if held != wanted:
            raise InputError(
                f"interaction_constraints[{s}] names {wanted} features but the parties hold "
                f"{held} of them: each name must be a feature of exactly one party (check the "
                "names, and that every host's party file has the same groups)"
            )
    return joined


# -- scoring a host's candidates -----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NodeRules:
    """The constraints of one node for a host's candidates: ``monotone`` the node's weight and
    bounds and the run's directions (None: no direction), ``allowed`` the features the node
    may split on over the joined feature order (None: no interaction group), ``offset`` where
    the host's tokens start in that order."""

    monotone: MonotoneNodes | None
    allowed: B8 | None
    offset: int


def score_host_candidates(
    grad: F64,
    hess: F64,
    counts: I64,
    tokens: I64 | None,
    G: F64,
    H: F64,
    n_rows: int,
    params: BoostParams,
    rules: NodeRules | None,
) -> F64:
    """Gains of a host's candidates at one node (``-inf``: invalid), as the core scores the
    same candidates: its gains (monotone ones under directions, where a candidate against its
    feature's direction is invalid), its ``min_child_weight`` rule on every output and its
    ``min_samples_leaf`` rule on counts, and a feature the node's interaction groups exclude
    made invalid. ``grad``/``hess`` ``(m, K)`` are the left sums, ``G``/``H`` ``(1, K)`` the
    node's totals; ``tokens`` each candidate's feature token (None: no tokens asked)."""
    p = params
    if rules is None or rules.monotone is None:
        gains = split_gains(grad, hess, G, H, p.reg_lambda)
    else:
        mono = rules.monotone
        direction = np.zeros(grad.shape[0], dtype=np.int64)
        if tokens is not None:
            direction = mono.direction[rules.offset + tokens]
        gains = monotone_split_gains(
            grad,
            hess,
            G - grad,
            H - hess,
            mono.weight,
            mono.lower,
            mono.upper,
            direction,
            p.reg_lambda,
            p.min_child_weight,
        )
    valid = np.all(hess >= p.min_child_weight, axis=1) & np.all(
        H - hess >= p.min_child_weight, axis=1
    )
    if p.min_samples_leaf > 1:
        valid &= (counts >= p.min_samples_leaf) & (n_rows - counts >= p.min_samples_leaf)
    if rules is not None and rules.allowed is not None:
        assert tokens is not None  # every host sends tokens when groups are in play
        valid &= rules.allowed[rules.offset + tokens]
    return np.asarray(np.where(valid, gains, -np.inf))
