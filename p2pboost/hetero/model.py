"""Per-party model files of hetero SecureBoost: each party's file holds only its own secrets.

* The **guest** file holds the trees' structure (children of every node), the *owner* of every
  split (the guest or host ``k``), the leaf weights, the base margin, the objective and the
  guest's own splits (feature, bin, raw threshold, missing direction). For a host's split it
  holds nothing but the owner: no host feature, bin or threshold.
* A **host** file holds, for each node it owns, the tree and node ids, the feature, bin and raw
  threshold and where missing values go. No leaf weight, label, gradient or gain (gains are
  derived from gradients), nothing about the guest's splits.

Both carry the same ``fingerprint`` (made by the guest at the end of training), so a
prediction that mixes files of different trainings fails loudly rather than silently
mispredicting. Files are versioned JSON; never pickle, so loading a model cannot run code.

The guest file may also carry the evaluation ``history`` of training (one value per round, for
learning curves). It is optional, outside the fingerprint, and absent from older files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.binning import BinMapper, check_matrix
from p2pboost.gbdt.history import History, history_from_json, history_to_json
from p2pboost.gbdt.objectives import Objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree

__all__ = [
    "FORMAT_VERSION",
    "GUEST_FORMAT",
    "HOST_FORMAT",
    "GuestModel",
    "GuestTree",
    "HostDecisions",
    "HostModel",
    "HostSplit",
    "joined_trees",
    "walk",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

GUEST_FORMAT = "p2pboost.hetero.guest"
HOST_FORMAT = "p2pboost.hetero.host"
FORMAT_VERSION = 1
#: ``GuestTree.owner`` of a leaf; 0 is the guest, ``k >= 1`` the ``k``-th host.
LEAF = -1
GUEST = 0


def walk(left: I64, right: I64, internal: B8, go_left: B8, depth: int) -> I64:
    """Leaf of every row: ``go_left[node, row]`` is the decision of internal ``node``."""
    n_rows = go_left.shape[1]
    node = np.zeros(n_rows, dtype=np.int64)
    for _ in range(depth):
        idx = np.flatnonzero(internal[node])
        if idx.size == 0:
            break
        nd = node[idx]
        node[idx] = np.where(go_left[nd, idx], left[nd], right[nd])
    return node


@dataclass(frozen=True, slots=True, eq=False)
class GuestTree:
    """One tree as the guest knows it (arrays indexed by node id).

    ``owner[i]``: -1 leaf, 0 guest split, ``k`` split of host ``k``. ``feature``,
    ``threshold_bin``, ``threshold`` and ``default_left`` describe guest splits only (-1, -1,
    NaN, False elsewhere). ``value`` ``(n, 1)`` holds the leaf weights (learning rate applied).
    """

    owner: I64
    feature: I64
    threshold_bin: I64
    threshold: F64
    default_left: B8
    left: I64
    right: I64
    value: F64
    gain: F64
    cover: F64
    depth: int

    @property
    def n_nodes(self) -> int:
        return int(self.owner.size)

    @property
    def internal(self) -> B8:
        return np.asarray(self.owner >= 0)

    def guest_decisions_raw(self, X: F64) -> B8:
        """``go_left[node, row]`` for the guest's splits on raw rows (False elsewhere)."""
        out = np.zeros((self.n_nodes, X.shape[0]), dtype=np.bool_)
        for nd in np.flatnonzero(self.owner == GUEST).tolist():
            x = X[:, self.feature[nd]]
            out[nd] = np.where(np.isnan(x), self.default_left[nd], x <= self.threshold[nd])
        return out

    def guest_decisions_binned(self, codes: npt.NDArray[Any], missing_bin: int) -> B8:
        """As :meth:`guest_decisions_raw` on bin codes ``(features, rows)``."""
        out = np.zeros((self.n_nodes, codes.shape[1]), dtype=np.bool_)
        for nd in np.flatnonzero(self.owner == GUEST).tolist():
            b = codes[self.feature[nd]]
            out[nd] = (b <= self.threshold_bin[nd]) | ((b == missing_bin) & self.default_left[nd])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner.tolist(),
            "feature": self.feature.tolist(),
            "threshold_bin": self.threshold_bin.tolist(),
            "threshold": [_finite_or_none(t) for t in self.threshold.tolist()],
            "default_left": self.default_left.tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "value": self.value.tolist(),
            "gain": self.gain.tolist(),
            "cover": self.cover.tolist(),
            "depth": self.depth,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], n_hosts: int, n_features: int) -> GuestTree:
        try:
            owner = np.asarray(d["owner"], dtype=np.int64)
            guest = owner == GUEST
            thr = [_none_to_float(t, g) for t, g in zip(d["threshold"], guest, strict=True)]
            tree = cls(
                owner=owner,
                feature=np.asarray(d["feature"], dtype=np.int64),
                threshold_bin=np.asarray(d["threshold_bin"], dtype=np.int64),
                threshold=np.asarray(thr, dtype=np.float64),
                default_left=np.asarray(d["default_left"], dtype=np.bool_),
                left=np.asarray(d["left"], dtype=np.int64),
                right=np.asarray(d["right"], dtype=np.int64),
                value=np.asarray(d["value"], dtype=np.float64),
                gain=np.asarray(d["gain"], dtype=np.float64),
                cover=np.asarray(d["cover"], dtype=np.float64),
                depth=int(d["depth"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"invalid guest tree: {exc}") from None
        tree.check(n_hosts, n_features)
        return tree

    def check(self, n_hosts: int, n_features: int) -> None:
        """Raise :class:`ModelError` unless the arrays form a valid tree."""
        n = self.n_nodes
        arrays = (
            self.feature,
            self.threshold_bin,
            self.threshold,
            self.default_left,
            self.left,
            self.right,
            self.gain,
            self.cover,
        )
        if n == 0 or any(a.shape != (n,) for a in arrays) or self.value.shape != (n, 1):
            raise ModelError("invalid guest tree: inconsistent array shapes")
        if not np.all(np.isfinite(self.value)):
            raise ModelError("invalid guest tree: bad leaf values")
        if np.any(self.owner < LEAF) or np.any(self.owner > n_hosts):
            raise ModelError("invalid guest tree: unknown owner")
        guest = self.owner == GUEST
        if np.any(self.feature[guest] < 0) or np.any(self.feature[guest] >= n_features):
            raise ModelError("invalid guest tree: feature out of range")
        internal = self.internal
        kids = np.concatenate([self.left[internal], self.right[internal]])
        if np.any(kids <= 0) or np.any(kids >= n) or np.unique(kids).size != kids.size:
            raise ModelError("invalid guest tree: bad child links")
        if not 0 <= self.depth <= 64:
            raise ModelError("invalid guest tree: bad depth")


@dataclass(frozen=True, slots=True)
class HostDecisions:
    """A host's answer for a batch of rows: ``go_left[i, row]`` for split ``(tree[i], node[i])``."""

    tree: I64
    node: I64
    go_left: B8


@dataclass(frozen=True, eq=False)
class GuestModel:
    """The guest's part of a hetero model (see the module docstring).

    ``history[set name][metric]``: the evaluation after every round (empty if none was run).
    """

    fingerprint: str
    params: BoostParams
    hosts: tuple[str, ...]
    mapper: BinMapper
    base_margin: F64
    trees: list[GuestTree]
    tree_output: list[int]
    trees_per_round: int
    best_iteration: int | None
    history: History = field(default_factory=dict)

    @property
    def objective(self) -> Objective:
        return get_objective(self.params)

    @property
    def n_features(self) -> int:
        return self.mapper.n_features

    @property
    def n_rounds(self) -> int:
        return len(self.trees) // self.trees_per_round

    def used_trees(self, n_rounds: int | None = None) -> int:
        """How many trees predictions use: ``n_rounds`` rounds (default: best or all)."""
        if n_rounds is None:
            n_rounds = self.n_rounds if self.best_iteration is None else self.best_iteration + 1
        if not 0 <= n_rounds <= self.n_rounds:
            raise InputError(f"n_rounds must be in [0, {self.n_rounds}], got {n_rounds}")
        return n_rounds * self.trees_per_round

    def host_nodes(self, host: int) -> tuple[I64, I64]:
        """``(tree, node)`` of every split host ``host`` (1-based) owns, in tree then node order."""
        trees, nodes = [], []
        for t, tree in enumerate(self.trees):
            own = np.flatnonzero(tree.owner == host)
            trees.append(np.full(own.size, t, dtype=np.int64))
            nodes.append(own.astype(np.int64))
        if not trees:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(trees), np.concatenate(nodes)

    def predict_margin(
        self, X: Any, decisions: Sequence[HostDecisions], n_rounds: int | None = None
    ) -> F64:
        """Raw scores ``(n, K)`` from the guest's features and every host's decisions."""
        arr = check_matrix(X, n_features=self.n_features)
        if len(decisions) != len(self.hosts):
            raise InputError(f"need decisions from {len(self.hosts)} hosts")
        used = self.used_trees(n_rounds)
        host_bits: dict[tuple[int, int], B8] = {}
        for dec in decisions:
            for i, (t, nd) in enumerate(zip(dec.tree.tolist(), dec.node.tolist(), strict=True)):
                host_bits[(t, nd)] = dec.go_left[i]
        margin = np.tile(self.base_margin, (arr.shape[0], 1))
        for t in range(used):
            tree = self.trees[t]
            go_left = tree.guest_decisions_raw(arr)
            for nd in np.flatnonzero(tree.owner > GUEST).tolist():
                bits = host_bits.get((t, nd))
                if bits is None or bits.shape != (arr.shape[0],):
                    raise InputError(f"host {tree.owner[nd]} gave no decision for node {nd}")
                go_left[nd] = bits
            leaves = walk(tree.left, tree.right, tree.internal, go_left, tree.depth)
            add_tree(margin, tree.value[leaves], self.tree_output[t])
        return margin

    def transform(self, margin: F64) -> F64:
        out = self.objective.transform(margin)
        return out[:, 0] if out.shape[1] == 1 else out

    def feature_importance(self, kind: str = "gain") -> F64:
        """Total gain (``"gain"``) or number of splits (``"split"``) of the guest's features."""
        if kind not in {"gain", "split"}:
            raise InputError(f"importance kind must be 'gain' or 'split', got {kind!r}")
        imp = np.zeros(self.n_features)
        for tree in self.trees[: self.used_trees()]:
            own = tree.owner == GUEST
            weights = tree.gain[own] if kind == "gain" else None
            imp += np.bincount(tree.feature[own], weights=weights, minlength=self.n_features)
        return imp

    # -- persistence -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": GUEST_FORMAT,
            "version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "params": self.params.to_dict(),
            "hosts": list(self.hosts),
            "mapper": self.mapper.to_dict(),
            "base_margin": self.base_margin.tolist(),
            "trees": [t.to_dict() for t in self.trees],
            "tree_output": list(self.tree_output),
            "trees_per_round": self.trees_per_round,
            "best_iteration": self.best_iteration,
        }
        if self.history:  # optional: files without it stay as they were
            out["history"] = history_to_json(self.history)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GuestModel:
        _check_header(d, GUEST_FORMAT)
        try:
            params = BoostParams.from_dict(dict(d["params"]))
            hosts = tuple(str(h) for h in d["hosts"])
            mapper = BinMapper.from_dict(d["mapper"])
            trees = [GuestTree.from_dict(t, len(hosts), mapper.n_features) for t in d["trees"]]
            out = [int(o) for o in d["tree_output"]]
            per_round = int(d["trees_per_round"])
            n_rounds = len(trees) // per_round if per_round > 0 else 0
            model = cls(
                fingerprint=str(d["fingerprint"]),
                params=params,
                hosts=hosts,
                mapper=mapper,
                base_margin=np.asarray(d["base_margin"], dtype=np.float64),
                trees=trees,
                tree_output=out,
                trees_per_round=per_round,
                best_iteration=None if d["best_iteration"] is None else int(d["best_iteration"]),
                history=history_from_json(d.get("history"), n_rounds),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"invalid guest model: {exc}") from None
        k = model.objective.n_outputs
        if model.base_margin.shape != (k,) or len(out) != len(trees):
            raise ModelError("invalid guest model: inconsistent outputs")
        if model.trees_per_round < 1 or len(trees) % model.trees_per_round:
            raise ModelError("invalid guest model: trees do not make whole rounds")
        if any(not -1 <= o < k for o in out):
            raise ModelError("invalid guest model: bad tree output")
        return model

    def save(self, path: str | os.PathLike[str]) -> None:
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> GuestModel:
        return cls.from_dict(_read_json(path))


@dataclass(frozen=True, slots=True)
class HostSplit:
    """One split a host owns: rows with ``x[feature] <= threshold`` (bin ``<= bin``) go left."""

    tree: int
    node: int
    feature: int
    bin: int
    threshold: float
    default_left: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "tree": self.tree,
            "node": self.node,
            "feature": self.feature,
            "bin": self.bin,
            "threshold": _finite_or_none(self.threshold),
            "default_left": self.default_left,
        }


@dataclass(frozen=True, eq=False)
class HostModel:
    """A host's part of a hetero model: only its own splits (see the module docstring)."""

    fingerprint: str
    guest: str
    n_features: int
    splits: tuple[HostSplit, ...]

    def decisions(self, X: Any) -> HostDecisions:
        """``go_left`` of every split this host owns for every row of its features ``X``."""
        arr = check_matrix(X, n_features=self.n_features)
        go_left = np.zeros((len(self.splits), arr.shape[0]), dtype=np.bool_)
        for i, s in enumerate(self.splits):
            x = arr[:, s.feature]
            go_left[i] = np.where(np.isnan(x), s.default_left, x <= s.threshold)
        trees = np.array([s.tree for s in self.splits], dtype=np.int64)
        nodes = np.array([s.node for s in self.splits], dtype=np.int64)
        return HostDecisions(trees, nodes, go_left)

    def feature_importance(self) -> F64:
        """Number of splits on each of this host's features (gains are the guest's secret)."""
        feats = np.array([s.feature for s in self.splits], dtype=np.int64)
        return np.bincount(feats, minlength=self.n_features).astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": HOST_FORMAT,
            "version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "guest": self.guest,
            "n_features": self.n_features,
            "splits": [s.to_dict() for s in self.splits],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostModel:
        _check_header(d, HOST_FORMAT)
        try:
            n_features = int(d["n_features"])
            splits = tuple(
                HostSplit(
                    tree=int(s["tree"]),
                    node=int(s["node"]),
                    feature=int(s["feature"]),
                    bin=int(s["bin"]),
                    threshold=np.inf if s["threshold"] is None else float(s["threshold"]),
                    default_left=bool(s["default_left"]),
                )
                for s in d["splits"]
            )
            model = cls(str(d["fingerprint"]), str(d["guest"]), n_features, splits)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"invalid host model: {exc}") from None
        if n_features < 1 or any(not 0 <= s.feature < n_features for s in splits):
            raise ModelError("invalid host model: feature out of range")
        if any(np.isnan(s.threshold) for s in splits):
            raise ModelError("invalid host model: NaN threshold")
        if len({(s.tree, s.node) for s in splits}) != len(splits):
            raise ModelError("invalid host model: duplicate split")
        return model

    def save(self, path: str | os.PathLike[str]) -> None:
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> HostModel:
        return cls.from_dict(_read_json(path))


def joined_trees(guest: GuestModel, hosts: Sequence[HostModel]) -> list[Tree]:
    """Every party's files combined into the core's trees on the joined features (guest's
    features first, then each host's in order): for audits and tests, where all parties agree
    to put their files together. Raises :class:`ModelError` for files of different trainings.
    """
    if len(hosts) != len(guest.hosts) or any(h.fingerprint != guest.fingerprint for h in hosts):
        raise ModelError("model files come from different trainings")
    offsets = np.cumsum([guest.n_features] + [h.n_features for h in hosts])
    by_node = {(k, s.tree, s.node): s for k, host in enumerate(hosts, start=1) for s in host.splits}
    out = []
    for t, tree in enumerate(guest.trees):
        feature = np.where(tree.owner == GUEST, tree.feature, -1)
        threshold_bin = tree.threshold_bin.copy()
        threshold = np.where(tree.owner == GUEST, tree.threshold, np.inf)
        default_left = tree.default_left.copy()
        for nd in np.flatnonzero(tree.owner > GUEST).tolist():
            k = int(tree.owner[nd])
            split = by_node.get((k, t, nd))
            if split is None:
                raise ModelError(f"host {k} has no split for tree {t} node {nd}")
            feature[nd] = offsets[k - 1] + split.feature
            threshold_bin[nd] = split.bin
            threshold[nd] = split.threshold
            default_left[nd] = split.default_left
        out.append(
            Tree(
                feature=feature,
                threshold_bin=threshold_bin,
                threshold=threshold,
                default_left=default_left,
                left=tree.left,
                right=tree.right,
                value=tree.value,
                gain=tree.gain,
                cover=tree.cover,
                depth=tree.depth,
            )
        )
    return out


def add_tree(margin: F64, values: F64, out: int) -> None:
    """Add one tree's outputs ``(n, 1)`` to output ``out`` of ``margin`` (-1: all outputs)."""
    if out < 0:
        margin += values
    else:
        margin[:, out] += values[:, 0]


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _none_to_float(t: Any, guest: bool) -> float:
    if t is None:
        return float(np.inf) if guest else float(np.nan)
    return float(t)


def _check_header(d: Mapping[str, Any], fmt: str) -> None:
    if not isinstance(d, Mapping) or d.get("format") != fmt:
        raise ModelError(f"not a {fmt} model file")
    if d.get("version") != FORMAT_VERSION:
        raise ModelError(f"unsupported {fmt} version {d.get('version')!r}")


def _write_json(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(obj, allow_nan=False, separators=(",", ":")))


def _read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read model file {os.fspath(path)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelError("model file must hold a JSON object")
    return data
