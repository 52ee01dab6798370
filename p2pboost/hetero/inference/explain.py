"""Exact TreeSHAP of a vertical model, computed by the guest alone from one-round inference.

Why the guest can: path-dependent TreeSHAP (:mod:`p2pboost.gbdt.shap`) reads, per tree, the
row's decision at every split and each node's cover. The guest holds every tree's structure,
leaf values and covers (sums of hessians it computed itself during training), and one-round
inference already hands it every host split's decision for every row. So nothing crosses the
wire for an explanation that a prediction does not send, in the default variant.

Who the players are:

* every **guest feature** is one player, named by the guest's feature names;
* by default every **host is one player** (``"host"``): the exact Shapley values of the game
  whose players are the guest's features and the hosts, each host's features grouped. The
  guest learns each host's share of each row's margin, nothing about which of its features;
* a host that **consents** (``explain_features``) sends, with its decision bits, one opaque
  token per split it owns: the same token for the same feature, drawn at random for each
  session, the mapping kept by the host alone (:class:`FeatureTokens`). Each distinct token is
  then a player (``"host:1f0c..."``), and the values are exact per-feature Shapley values;
  the host maps its tokens back to names for its own records.

Grouped values are not the sums of per-feature ones (the games differ), so each variant is
computed from the tree, never derived from the other.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.shap import ensemble_contributions, reason_codes
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.inference.forest import HostSplits
from p2pboost.hetero.model import GUEST, GuestModel, HostModel

__all__ = [
    "BASE",
    "Contributions",
    "FeatureTokens",
    "check_tokens",
    "guest_contributions",
    "token_name",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
#: The name of the last column: the base margin plus every tree's expected value.
BASE = "base_value"
#: Tokens are drawn below this bound (non-negative int64 on the wire).
_TOKEN_BOUND = 1 << 62


def token_name(host: str, token: int) -> str:
    """How the guest names a consenting host's feature: ``host:<16 hex digits>``."""
    return f"{host}:{token:016x}"


@dataclass(frozen=True, slots=True)
class FeatureTokens:
    """A consenting host's opaque tokens: one random token per feature its splits use.

    Drawn anew for each session (so tokens of two sessions cannot be linked by the guest);
    the host keeps :attr:`by_token` for its own records and never sends it.
    """

    #: Token of each feature index the host's splits use.
    by_feature: Mapping[int, int]
    #: The host's feature name of each token (``f<i>`` without names).
    by_token: Mapping[int, str]

    @classmethod
    def draw(cls, model: HostModel) -> FeatureTokens:
        used = sorted({s.feature for s in model.splits})
        tokens: dict[int, int] = {}
        taken: set[int] = set()
        for f in used:
            token = secrets.randbelow(_TOKEN_BOUND)
            while token in taken:  # practically never: 62 random bits
                token = secrets.randbelow(_TOKEN_BOUND)
            taken.add(token)
            tokens[f] = token
        names = model.feature_names
        by_token = {t: (names[f] if names is not None else f"f{f}") for f, t in tokens.items()}
        return cls(tokens, by_token)

    def of_splits(self, splits: HostSplits) -> I64:
        """The token of every split, in the splits' (wire) order."""
        return np.array([self.by_feature[int(f)] for f in splits.feature], dtype=np.int64)

    def names(self, host: str) -> dict[str, str]:
        """The guest's column names (``host:token``) -> this host's feature names."""
        return {token_name(host, t): name for t, name in self.by_token.items()}


def check_tokens(tokens: I64 | None, n_splits: int) -> str | None:
    """What is wrong with a host's tokens (a sentence), or None: one non-negative token per
    split, below the draw's bound."""
    if tokens is None:
        return None
    if tokens.shape != (n_splits,):
        return f"{tokens.size} feature tokens for {n_splits} splits"
    if tokens.size and (tokens.min() < 0 or tokens.max() >= _TOKEN_BOUND):
        return "feature tokens out of range"
    return None


@dataclass(frozen=True, slots=True, eq=False)
class Contributions:
    """Per-row contributions in XGBoost's ``pred_contribs`` layout: ``values`` is ``(n,
    P + 1)`` (``(n, K, P + 1)`` for K outputs), one column per player named in ``names``,
    then :data:`BASE`; every row sums to its margin."""

    values: F64
    names: list[str]

    def reasons(
        self, k: int, direction: Literal["increase", "decrease"] = "increase"
    ) -> list[list[tuple[str, float]]]:
        """The top ``k`` players per row (:func:`~p2pboost.gbdt.shap.reason_codes`) as
        ``(name, value)`` pairs, strongest first; rows with fewer movers get fewer."""
        if self.values.ndim != 2:
            raise InputError("reason codes are defined for single-output models")
        players, values = reason_codes(self.values, k, direction=direction)
        out = []
        for p_row, v_row in zip(players.tolist(), values.tolist(), strict=True):
            out.append([(self.names[p], v) for p, v in zip(p_row, v_row, strict=True) if p >= 0])
        return out


def guest_contributions(
    model: GuestModel,
    X: Any,
    host_bits: Sequence[B8],
    host_tokens: Sequence[I64 | None] = (),
    *,
    n_rounds: int | None = None,
) -> Contributions:
    """Exact TreeSHAP contributions from the guest's rows ``X`` and each host's decision bits.

    ``host_bits[k]``: ``go_left[split, row]`` of host ``k+1``'s splits in
    :meth:`GuestModel.host_nodes` order (what one-round inference delivers), of every tree or
    of the used ones only (the order puts those first). ``host_tokens[k]``: that host's token
    per split, in the same order, when it consents (per-feature values); None (or missing)
    makes the host one player.
    """
    arr = Features.from_user(
        X,
        order=model.feature_names,
        n_features=model.n_features,
        allow_no_features=model.n_features == 0,
    ).dense()
    n = arr.shape[0]
    used = model.used_trees(n_rounds)
    trees = model.trees[:used]
    if len(host_bits) != len(model.hosts):
        raise InputError(f"need bits from {len(model.hosts)} hosts, got {len(host_bits)}")
    tokens = list(host_tokens) + [None] * (len(model.hosts) - len(host_tokens))
    names = list(model.feature_names or [f"f{i}" for i in range(model.n_features)])
    # Per host: the flat position of each of its splits, and each split's player.
    bits_at: dict[tuple[int, int], B8] = {}
    player_at: dict[tuple[int, int], int] = {}
    for k, (host, bits) in enumerate(zip(model.hosts, host_bits, strict=True), start=1):
        t_idx, nd_idx = model.host_nodes(k)
        keep = t_idx < used
        t_idx, nd_idx = t_idx[keep], nd_idx[keep]
        # Splits are in (tree, node) order: those of the used trees come first.
        if bits.ndim != 2 or bits.shape[0] < t_idx.size or bits.shape[1] != n:
            raise InputError(f"host bits of shape {bits.shape}, expected {(t_idx.size, n)}")
        bits = bits[: t_idx.size]
        tok = tokens[k - 1]
        if tok is not None:
            problem = check_tokens(tok[: t_idx.size], t_idx.size)
            if problem is not None:
                raise InputError(f"host {host!r}: {problem}")
            players: dict[int, int] = {}
            for token in tok[: t_idx.size].tolist():
                if token not in players:
                    players[token] = len(names)
                    names.append(token_name(host, token))
            split_player = [players[t] for t in tok[: t_idx.size].tolist()]
        else:
            split_player = [len(names)] * t_idx.size
            names.append(host)
        for i, (t, nd) in enumerate(zip(t_idx.tolist(), nd_idx.tolist(), strict=True)):
            bits_at[(t, nd)] = bits[i]
            player_at[(t, nd)] = split_player[i]

    def decisions(t: int, tree: Tree) -> B8:
        go_left = tree.local_decisions_raw(arr)
        for nd in np.flatnonzero(tree.owner > GUEST).tolist():
            go_left[nd] = bits_at[(t, nd)]
        return go_left

    def players_of(t: int, tree: Tree) -> I64:
        out = np.where(tree.owner == GUEST, tree.feature, -1).astype(np.int64)
        for nd in np.flatnonzero(tree.owner > GUEST).tolist():
            out[nd] = player_at[(t, nd)]
        return out

    n_players = len(names)
    if not trees:
        values = np.zeros((n, model.base_margin.size, n_players + 1))
        values[:, :, n_players] = model.base_margin
        single = values[:, 0, :] if model.base_margin.size == 1 else values
        return Contributions(single, [*names, BASE])
    values = ensemble_contributions(
        trees, model.tree_output[:used], model.base_margin, decisions, players_of, n_players
    )
    return Contributions(values, [*names, BASE])
