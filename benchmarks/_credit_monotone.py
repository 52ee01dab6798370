"""The ``credit`` benchmark's monotone section: a federated training with monotone constraints on
two guest and two host features of give_credit30k, against the core and XGBoost.

:func:`monotone_section` runs the guest and the host as separate processes over loopback
WebSocket + mTLS (:func:`benchmarks._hetero_parties.run_federation`), twice in the same call:
without constraints, then with them, so ``s_per_tree`` and ``s_per_tree_unconstrained`` are
measured side by side. The guest declares the directions of its two features in its
``BoostParams``; the host declares its own two by name in ``host_train`` (its party file's
``[train] monotone_constraints``); the guest learns the host's directions by anonymous
feature token only.

**Directions.** Per party, the two features with the largest absolute Spearman correlation
with the label on the training rows, constrained in the sign of that correlation. The guest
computes its own on its side; a host holds no labels, so a real host declares its directions
from what it knows of its features (more debt never lowers the risk); here the benchmark's
parent, which reads both files, computes the host's signs the same way as a stand-in for that
knowledge.

What it returns (the keys the ``credit`` benchmark prints under ``"monotone"``):

* ``identical_to_core``: the joined federated trees equal, node for node (features, bins,
  directions, leaf values, gains), the core's model trained on the joined training rows
  (guest's features first) with the same directions;
* ``violations``: of 10,000 rows drawn from the test rows, how many have a margin that moves
  against a constrained feature's direction when that feature alone runs over its quantiles
  (counted per feature, summed);
* ``auc`` (the federated model's, through the prediction protocol) and ``xgboost_auc``
  (XGBoost ``hist`` on the joined columns with the same directions, ``max_bin``, depth,
  rounds, learning rate and lambda), both on the test rows;
* ``s_per_tree`` and ``s_per_tree_unconstrained``: the guest's training seconds per tree.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._hetero_parties import GUEST, run_federation
from benchmarks.lossless import HeteroSplit, load_hetero_split
from p2pboost import certs
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.metrics import auc
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees

__all__ = ["monotone_section"]

DATASET = "give_credit30k"
#: Rows the violation count varies, and the points along each constrained feature.
VIOLATION_ROWS = 10_000
GRID_POINTS = 16
BINS = 32
LEARNING_RATE = 0.3


def _directions(X: np.ndarray, y: np.ndarray, names: list[str], k: int = 2) -> dict[str, int]:
    """The ``k`` features most correlated (Spearman) with the label, by the sign of it."""
    ry = _ranks(y)
    corr = np.nan_to_num(
        np.array([np.corrcoef(_ranks(X[:, j]), ry)[0, 1] for j in range(X.shape[1])])
    )
    top = np.argsort(-np.abs(corr), kind="stable")[:k]
    return {names[j]: 1 if corr[j] > 0 else -1 for j in sorted(top.tolist())}


def _ranks(v: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their average rank (Spearman's)."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    return np.asarray((upper - (counts - 1) / 2.0)[inverse], dtype=np.float64)


def _same_trees(ours: list[Tree], core: list[Tree]) -> bool:
    """Tree for tree: structure, split features, bins, directions, leaf values and gains."""
    if len(ours) != len(core):
        return False
    for a, b in zip(ours, core, strict=True):
        internal = b.feature >= 0
        if a.n_nodes != b.n_nodes or not (
            np.array_equal(a.feature, b.feature)
            and np.array_equal(a.left, b.left)
            and np.array_equal(a.right, b.right)
            and np.array_equal(a.threshold_bin[internal], b.threshold_bin[internal])
            and np.array_equal(a.default_left[internal], b.default_left[internal])
            and np.array_equal(a.value[~internal], b.value[~internal])
            and np.array_equal(a.gain[internal], b.gain[internal])
        ):
            return False
    return True


def _violations(trees: list[Tree], X: np.ndarray, directions: dict[int, int], seed: int = 0) -> int:
    """Rows (of ``VIOLATION_ROWS`` drawn from ``X``) whose margin moves against a direction
    when that feature alone runs over its quantiles, summed over the constrained features."""
    rng = np.random.default_rng(seed)
    rows = X[rng.integers(0, X.shape[0], VIOLATION_ROWS)]
    bad = 0
    for f, d in directions.items():
        grid = np.unique(np.quantile(X[:, f], np.linspace(0.0, 1.0, GRID_POINTS)))
        margins = np.empty((rows.shape[0], grid.size))
        for j, v in enumerate(grid):
            Z = rows.copy()
            Z[:, f] = v
            margins[:, j] = sum(t.predict_raw(Z)[:, 0] for t in trees)
        steps = np.diff(margins, axis=1) * d
        bad += int((steps < 0).any(axis=1).sum())
    return bad


def _xgboost_auc(
    split: HeteroSplit, params: BoostParams, directions: list[int], X_train: np.ndarray
) -> float:
    import xgboost

    model = xgboost.XGBClassifier(
        tree_method="hist",
        max_bin=params.max_bin,
        max_depth=params.max_depth,
        learning_rate=params.learning_rate,
        reg_lambda=params.reg_lambda,
        n_estimators=params.n_estimators,
        monotone_constraints="(" + ",".join(str(d) for d in directions) + ")",
        n_jobs=1,
        random_state=0,
    )
    model.fit(X_train, split.y_train)
    X_test = np.hstack([split.guest_test, split.host_test])
    return auc(split.y_test, np.asarray(model.predict_proba(X_test)[:, 1]))


def _federate(
    split: HeteroSplit,
    params: BoostParams,
    key_bits: int,
    guest_options: dict[str, Any],
    host_options: dict[str, Any],
) -> tuple[list[Tree], float, np.ndarray]:
    """One federated training: the joined trees, the guest's seconds and the test
    probabilities (the prediction protocol)."""
    n_host = split.host_train.shape[1]
    with tempfile.TemporaryDirectory(prefix="p2pboost-credit-") as tmp:
        fed = Path(tmp) / "federation"
        certs.init(fed, [GUEST, "host1"])
        result = run_federation(
            fed,
            split,
            [np.arange(n_host)],
            params,
            key_bits=key_bits,
            workers=2,
            guest_options=guest_options,
            host_options=[host_options],
        )
    guest = GuestModel.from_dict(result.guest["model"])
    host = HostModel.from_dict(result.hosts[0]["model"])
    trees = joined_trees(guest, [host])
    return trees, float(result.guest["seconds"]), np.asarray(result.guest["proba"])


def monotone_section(
    data_dir: Path, key_bits: int = 1024, trees: int = 25, depth: int = 5
) -> dict[str, Any]:
    """The monotone section of the ``credit`` benchmark (the module docstring)."""
    split = load_hetero_split(Path(data_dir), DATASET)
    guest_names = [f"guest_x{j}" for j in range(split.guest_train.shape[1])]
    host_names = [f"host_x{j}" for j in range(split.host_train.shape[1])]
    names = guest_names + host_names
    guest_dirs = _directions(split.guest_train, split.y_train, guest_names)
    host_dirs = _directions(split.host_train, split.y_train, host_names)
    params = BoostParams(
        objective="binary:logistic",
        n_estimators=trees,
        max_depth=depth,
        max_bin=BINS,
        learning_rate=LEARNING_RATE,
        reg_lambda=1.0,
        seed=0,
    ).validate()
    constrained = params.with_updates(monotone_constraints=guest_dirs)
    free_trees, free_seconds, _ = _federate(
        split,
        params,
        key_bits,
        {"feature_names": guest_names},
        {"feature_names": host_names},
    )
    fed_trees, seconds, proba = _federate(
        split,
        constrained,
        key_bits,
        {"feature_names": guest_names},
        {"feature_names": host_names, "monotone_constraints": host_dirs},
    )
    X_train = np.hstack([split.guest_train, split.host_train])
    X_test = np.hstack([split.guest_test, split.host_test])
    joined = {**guest_dirs, **host_dirs}
    core = train(
        params.with_updates(monotone_constraints=joined),
        X_train,
        split.y_train,
        feature_names=names,
    )
    directions = [joined.get(n, 0) for n in names]
    by_index = {names.index(n): d for n, d in joined.items()}
    return {
        "identical_to_core": _same_trees(fed_trees, core.trees),
        "violations": _violations(fed_trees, X_test, by_index),
        "violations_unconstrained": _violations(free_trees, X_test, by_index),
        "auc": round(auc(split.y_test, proba), 6),
        "xgboost_auc": round(_xgboost_auc(split, params, directions, X_train), 6),
        "s_per_tree": round(seconds / max(1, len(fed_trees)), 4),
        "s_per_tree_unconstrained": round(free_seconds / max(1, len(free_trees)), 4),
        "directions": joined,
        "trees": trees,
        "depth": depth,
        "key_bits": key_bits,
    }
