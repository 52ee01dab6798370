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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError
from p2pboost.files import atomic_write
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.booster import Booster, privacy_from, rng_state_from
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.history import History, history_from_json, history_to_json
from p2pboost.gbdt.names import model_names
from p2pboost.gbdt.objectives import Objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import add_tree
from p2pboost.gbdt.tree import LEAF, LOCAL, Tree

__all__ = [
    "FORMAT_VERSION",
    "GUEST",
    "GUEST_FORMAT",
    "HOST_FORMAT",
    "GuestModel",
    "HostDecisions",
    "HostModel",
    "HostSplit",
    "joined_trees",
    "merged_model",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

GUEST_FORMAT = "p2pboost.hetero.guest"
HOST_FORMAT = "p2pboost.hetero.host"
FORMAT_VERSION = 1
#: ``Tree.owner`` of the guest's own splits; ``k >= 1`` is the ``k``-th host, -1 a leaf.
GUEST = LOCAL


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
    trees: list[Tree]
    tree_output: list[int]
    trees_per_round: int
    best_iteration: int | None
    history: History = field(default_factory=dict)
    #: The guest's feature names (None: by position only; see :mod:`p2pboost.gbdt.names`).
    feature_names: list[str] | None = None
    #: The round loop's random generator after the last round (a warm start continues it).
    rng_state: dict[str, Any] | None = None
    #: Figures about the training only the guest can compute (name -> value), e.g.
    #: ``leaf_purity_first_shared_tree`` (see :func:`p2pboost.gbdt.metrics.leaf_purity`).
    diagnostics: dict[str, float] = field(default_factory=dict)
    #: What a differentially private model spent (:mod:`p2pboost.gbdt.privacy`), or None.
    privacy: dict[str, Any] | None = None
    #: A private model's training only: the row-trees the guest's gradient filter left out.
    #: A noiseless count of the training rows, outside the guarantee: never written to the
    #: model file (a loaded model has None), so it stays with the guest.
    filtered_rows: int | None = None
    #: What label differential privacy spent (``HeteroConfig.label_dp_epsilon``;
    #: :mod:`p2pboost.hetero.training.label_dp`), or None.
    label_privacy: dict[str, Any] | None = None

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
        arr = Features.from_user(
            X,
            order=self.feature_names,
            n_features=self.n_features,
            allow_no_features=self.n_features == 0,  # a guest with labels only
        ).dense()
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
            go_left = tree.local_decisions_raw(arr)
            for nd in np.flatnonzero(tree.owner > GUEST).tolist():
                bits = host_bits.get((t, nd))
                if bits is None or bits.shape != (arr.shape[0],):
                    raise InputError(f"host {tree.owner[nd]} gave no decision for node {nd}")
                go_left[nd] = bits
            add_tree(margin, tree.value[tree.leaves(go_left)], self.tree_output[t])
        return margin

    def transform(self, margin: F64) -> F64:
        """Predictions from margins (probabilities, classes' probabilities or values)."""
        return self.objective.prediction(margin)

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
            "trees": [t.to_dict(owners=True) for t in self.trees],
            "tree_output": list(self.tree_output),
            "trees_per_round": self.trees_per_round,
            "best_iteration": self.best_iteration,
        }
        if self.history:  # optional: files without it stay as they were
            out["history"] = history_to_json(self.history)
        if self.feature_names is not None:
            out["feature_names"] = list(self.feature_names)
        if self.rng_state is not None:
            out["rng_state"] = self.rng_state
        if self.diagnostics:
            out["diagnostics"] = dict(self.diagnostics)
        if self.privacy is not None:
            out["privacy"] = dict(self.privacy)
        if self.label_privacy is not None:
            out["label_privacy"] = dict(self.label_privacy)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GuestModel:
        _check_header(d, GUEST_FORMAT)
        try:
            params = BoostParams.from_dict(dict(d["params"]))
            hosts = tuple(str(h) for h in d["hosts"])
            mapper = BinMapper.from_dict(d["mapper"])
            trees = [_guest_tree(t, len(hosts), mapper.n_features) for t in d["trees"]]
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
                feature_names=model_names(d.get("feature_names"), mapper.n_features),
                rng_state=rng_state_from(d.get("rng_state")),
                diagnostics={str(k): float(v) for k, v in dict(d.get("diagnostics", {})).items()},
                privacy=privacy_from(d.get("privacy"), params),
                label_privacy=_label_privacy(d.get("label_privacy")),
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
        # One output per tree, or every output in each (multi-output trees: output -1).
        if any(t.value.shape[1] != (k if o < 0 else 1) for t, o in zip(trees, out, strict=True)):
            raise ModelError("invalid guest model: a tree's leaves do not match its output")
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
    #: This host's feature names (None: by position only; see :mod:`p2pboost.gbdt.names`).
    feature_names: list[str] | None = None

    def decisions(self, X: Any) -> HostDecisions:
        """``go_left`` of every split this host owns for every row of its features ``X`` (a
        DataFrame's columns matched by name)."""
        given = Features.from_user(
            X, order=self.feature_names, n_features=self.n_features, sparse=True
        )
        features = np.array([s.feature for s in self.splits], dtype=np.int64)
        values = given.columns(features)  # sparse: only the split features made dense
        go_left = np.zeros((len(self.splits), given.n_rows), dtype=np.bool_)
        for i, s in enumerate(self.splits):
            x = values[i]
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
            **({"feature_names": list(self.feature_names)} if self.feature_names else {}),
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
            names = model_names(d.get("feature_names"), n_features)
            model = cls(str(d["fingerprint"]), str(d["guest"]), n_features, splits, names)
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
        feature = tree.feature.copy()
        threshold_bin = tree.threshold_bin.copy()
        threshold = tree.threshold.copy()
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
        owner = np.where(tree.internal, LOCAL, LEAF).astype(np.int64)
        out.append(
            replace(
                tree,
                feature=feature,
                threshold_bin=threshold_bin,
                threshold=threshold,
                default_left=default_left,
                owner=owner,
            )
        )
    return out


def merged_model(guest: GuestModel, hosts: Sequence[HostModel]) -> Booster:
    """One whole model from the guest's file and every host's part, in the guest's host order:
    what the guest may build only when every host consents by handing over its part (it holds
    the host's thresholds). It predicts from raw feature values as the federation does, and
    exports (:mod:`p2pboost.gbdt.export`, :mod:`p2pboost.gbdt.export_onnx`).

    A host's bins are not in its part; the merged model's bins of a host feature are the
    thresholds its splits use (enough for every split, binned or raw, to send the same rows
    left). :class:`ModelError` for files of different trainings.
    """
    trees = joined_trees(guest, hosts)
    offsets = np.cumsum([guest.n_features] + [h.n_features for h in hosts])
    edges = [e.copy() for e in guest.mapper.edges]
    host_edges: list[F64] = []
    for host in hosts:
        for f in range(host.n_features):
            cuts = {s.threshold for s in host.splits if s.feature == f and np.isfinite(s.threshold)}
            host_edges.append(np.array(sorted(cuts), dtype=np.float64))
    edges += host_edges
    mapper = BinMapper.from_dict(
        {"max_bin": guest.params.max_bin, "edges": [e.tolist() for e in edges]}
    )
    out = []
    for tree in trees:
        bins = tree.threshold_bin.copy()
        for nd in np.flatnonzero(tree.feature >= offsets[0]).tolist():
            cut = edges[int(tree.feature[nd])]
            t = float(tree.threshold[nd])
            bins[nd] = cut.size if not np.isfinite(t) else int(np.searchsorted(cut, t))
        out.append(replace(tree, threshold_bin=bins))
    names = None
    parts = [guest.feature_names, *(h.feature_names for h in hosts)]
    if all(p is not None for p in parts):
        names = [n for p in parts for n in (p or [])]
        if len(set(names)) != len(names):  # parties may reuse a name: then by position
            names = None
    return Booster(
        guest.params,
        mapper,
        guest.base_margin,
        out,
        list(guest.tree_output),
        guest.trees_per_round,
        guest.best_iteration,
        guest.history,
        feature_names=names,
        privacy=guest.privacy,
    )


def _guest_tree(d: Any, n_hosts: int, n_features: int) -> Tree:
    """A tree of a guest file: splits owned by the guest or one of ``n_hosts`` hosts."""
    if not isinstance(d, Mapping) or "owner" not in d:
        raise ModelError("invalid tree: a guest tree names the owner of every node")
    tree = Tree.from_dict(d, n_hosts, n_features)
    if tree.value.ndim != 2 or tree.value.shape[0] != tree.n_nodes:
        raise ModelError("invalid tree: a guest tree has a value per node")
    return tree


def _label_privacy(value: object) -> dict[str, Any] | None:
    """A guest file's label-DP record, checked: a record with a positive epsilon, or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ModelError("invalid guest model: label_privacy is not a record")
    eps = value.get("epsilon")
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise ModelError("invalid guest model: label_privacy record without a positive epsilon")
    return {str(k): v for k, v in value.items()}


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _check_header(d: Mapping[str, Any], fmt: str) -> None:
    if not isinstance(d, Mapping) or d.get("format") != fmt:
        raise ModelError(f"not a {fmt} model file")
    if d.get("version") != FORMAT_VERSION:
        raise ModelError(f"unsupported {fmt} version {d.get('version')!r}")


def _write_json(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(obj, allow_nan=False, separators=(",", ":")).encode())


def _read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read model file {os.fspath(path)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelError("model file must hold a JSON object")
    return data
