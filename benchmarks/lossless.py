"""Lossless check: p2pboost against XGBoost on the joined vertical data sets.

``python -m benchmarks lossless --dataset NAME --mode plain [--trees 25 --depth 5 --bins 32
--lr 0.3 --data-dir DIR --seed 0 --repeat 3]``

Reads ``NAME_hetero_guest.csv`` (id, y, guest features) and ``NAME_hetero_host.csv`` (id, host
features), joins them on ``id`` (guest columns first, then host columns: the global feature
order of the federated protocol), splits 2/3 : 1/3 with ``train_test_split(test_size=1/3,
random_state=0)`` and trains p2pboost and ``xgboost`` (``tree_method="hist"``, one thread) with
the same trees, depth, bins, learning rate and lambda. Training time per tree is the median over
``--repeat`` runs of each, measured alternately in the same process.

Modes: ``plain`` (the plaintext core on the joined data). The loader returns the guest and host
column blocks separately so federated modes can be added next to it.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table, read_csv
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.metrics import accuracy, auc, rmse
from p2pboost.gbdt.params import BoostParams

__all__ = ["HeteroSplit", "Task", "load_hetero_split", "main"]

DATASETS = (
    "breast",
    "default_credit",
    "give_credit30k",
    "vehicle_scale",
    "student",
    "synth150k",
    "synth_mc11",
)
MODES = ("plain",)
#: Integer labels with at most this many distinct values are classes; else regression
#: (synth_mc11 has 11 classes; student's grades take 18 values).
_MAX_CLASSES = 12


class Task(StrEnum):
    BINARY = "binary"
    MULTICLASS = "multiclass"
    REGRESSION = "regression"


@dataclass(frozen=True)
class HeteroSplit:
    """Train/test rows of a vertical data set, guest and host feature blocks kept apart."""

    guest_train: np.ndarray
    host_train: np.ndarray
    y_train: np.ndarray
    guest_test: np.ndarray
    host_test: np.ndarray
    y_test: np.ndarray
    task: Task
    n_classes: int

    @property
    def X_train(self) -> np.ndarray:
        return np.hstack([self.guest_train, self.host_train])

    @property
    def X_test(self) -> np.ndarray:
        return np.hstack([self.guest_test, self.host_test])


def load_hetero_split(directory: Path, dataset: str) -> HeteroSplit:
    """Join guest and host files on ``id`` and split 2/3 : 1/3 (``random_state=0``)."""
    from sklearn.model_selection import train_test_split

    g_cols, guest = read_csv(directory / f"{dataset}_hetero_guest.csv")
    h_cols, host = read_csv(directory / f"{dataset}_hetero_host.csv")
    gi, yi, hi = g_cols.index("id"), g_cols.index("y"), h_cols.index("id")
    g_feat = [i for i, c in enumerate(g_cols) if c not in {"id", "y"}]
    h_feat = [i for i, c in enumerate(h_cols) if c != "id"]
    host_row = {int(v): r for r, v in enumerate(host[:, hi])}
    try:
        order = np.array([host_row[int(v)] for v in guest[:, gi]])
    except KeyError as exc:
        raise SystemExit(f"{dataset}: guest id {exc} has no host row") from None
    Xg, Xh, y = guest[:, g_feat], host[order][:, h_feat], guest[:, yi]
    task, n_classes = _task(y)
    idx = np.arange(y.size)
    tr, te = train_test_split(idx, test_size=1 / 3, random_state=0)
    return HeteroSplit(Xg[tr], Xh[tr], y[tr], Xg[te], Xh[te], y[te], task, n_classes)


def _task(y: np.ndarray) -> tuple[Task, int]:
    values = np.unique(y)
    if np.all(values == np.round(values)) and values.size <= _MAX_CLASSES:
        if values.size == 2:
            return Task.BINARY, 2
        return Task.MULTICLASS, int(values.size)
    return Task.REGRESSION, 0


def _metric(task: Task) -> tuple[str, Any]:
    return {Task.BINARY: ("auc", auc), Task.MULTICLASS: ("accuracy", accuracy)}.get(
        task, ("rmse", rmse)
    )


def _params(args: argparse.Namespace, split: HeteroSplit) -> BoostParams:
    objective = {
        Task.BINARY: "binary:logistic",
        Task.MULTICLASS: "multi:softmax",
        Task.REGRESSION: "reg:squarederror",
    }[split.task]
    return BoostParams(
        objective=objective,
        num_class=max(1, split.n_classes if split.task is Task.MULTICLASS else 1),
        n_estimators=args.trees,
        max_depth=args.depth,
        max_bin=args.bins,
        learning_rate=args.lr,
        reg_lambda=1.0,
        seed=args.seed,
    ).validate()


def _xgboost_model(args: argparse.Namespace, split: HeteroSplit) -> Any:
    import xgboost

    common = {
        "tree_method": "hist",
        "max_bin": args.bins,
        "max_depth": args.depth,
        "learning_rate": args.lr,
        "reg_lambda": 1.0,
        "n_estimators": args.trees,
        "n_jobs": 1,
        "random_state": args.seed,
    }
    if split.task is Task.REGRESSION:
        return xgboost.XGBRegressor(**common)
    return xgboost.XGBClassifier(**common)


def _predict_xgb(model: Any, X: np.ndarray, task: Task) -> np.ndarray:
    if task is Task.BINARY:
        return np.asarray(model.predict_proba(X)[:, 1])
    if task is Task.MULTICLASS:
        return np.asarray(model.predict_proba(X))
    return np.asarray(model.predict(X))


def main(argv: list[str]) -> int:
    if "hetero" in argv or "--mode=hetero" in argv:  # federated mode: own options and module
        from benchmarks._hetero_lossless import main as hetero_main

        return hetero_main(argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks lossless",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--mode", default="plain", help="plain (more modes to come)")
    parser.add_argument("--trees", type=int, default=25)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (median)")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if args.mode not in MODES:
        print(
            f"mode {args.mode!r} is not available yet; choose one of: {', '.join(MODES)}",
            file=sys.stderr,
        )
        return 2
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")

    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    X_train, X_test = split.X_train, split.X_test
    params = _params(args, split)
    metric_name, metric = _metric(split.task)

    ours_times: list[float] = []
    xgb_times: list[float] = []
    booster: Booster | None = None
    model: Any = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        booster = train(params, X_train, split.y_train)
        ours_times.append(time.perf_counter() - t0)
        model = _xgboost_model(args, split)
        t0 = time.perf_counter()
        model.fit(X_train, split.y_train)
        xgb_times.append(time.perf_counter() - t0)
    assert booster is not None
    ours = float(metric(split.y_test, booster.predict(X_test)))
    theirs = float(metric(split.y_test, _predict_xgb(model, X_test, split.task)))
    s_per_tree = float(np.median(ours_times)) / args.trees
    xgb_s_per_tree = float(np.median(xgb_times)) / args.trees

    print_table(
        [
            ("dataset", args.dataset),
            ("mode", args.mode),
            ("task", split.task.value),
            ("train rows / test rows", f"{split.y_train.size} / {split.y_test.size}"),
            (
                "guest / host features",
                f"{split.guest_train.shape[1]} / {split.host_train.shape[1]}",
            ),
            ("trees / depth / bins / lr", f"{args.trees} / {args.depth} / {args.bins} / {args.lr}"),
            (f"p2pboost test {metric_name}", ours),
            (f"xgboost test {metric_name}", theirs),
            ("difference", ours - theirs),
            ("p2pboost s/tree (median)", s_per_tree),
            ("xgboost s/tree (median)", xgb_s_per_tree),
            ("ratio", s_per_tree / xgb_s_per_tree),
        ],
        title=f"lossless: p2pboost {args.mode} vs xgboost hist",
    )
    emit_json(
        {
            "benchmark": "lossless",
            "dataset": args.dataset,
            "mode": args.mode,
            "metric": metric_name,
            "p2pboost": ours,
            "xgboost": theirs,
            "s_per_tree": s_per_tree,
            "xgboost_s_per_tree": xgb_s_per_tree,
        }
    )
    return 0
