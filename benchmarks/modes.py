"""Vertical training modes side by side: standard, mix, layered and complete_secure.

``python -m benchmarks modes --dataset give_credit30k --trees 10 --depth 5 --key-bits 1024
[--host-depth 2 --per-party 1 --complete-secure 1 --hosts 1 --bins 32 --lr 0.3 --workers W
--data-dir DIR]``

Each mode is a full run of :func:`benchmarks.hetero.run_federation` (guest and hosts as
separate processes over TLS WebSockets on 127.0.0.1), one after the other on the same split
(:func:`benchmarks.lossless.load_hetero_split`): ``std``; ``mix`` (``tree_num_per_party``);
``layered`` (``host_depth`` on top, ``depth - host_depth`` guest layers below);
``complete_secure`` (the first rounds on guest features). Per mode: the guest's training wall
time per tree, the test AUC, the bytes the guest's node moved per tree, and whether the joined
model equals the plaintext core's trained with the same feature schedule
(:class:`p2pboost.hetero.training.modes.FeatureSchedule`) on the joined rows.

Last line: ``{"benchmark": "modes", "dataset", "trees", "depth", "key_bits", "std": {...},
"mix": {...}, "layered": {...}, "complete_secure": {...}, "mix_over_std",
"layered_over_std"}`` with ``{"s_per_tree", "auc", "bytes_per_tree", "identical_to_core"}``
per mode (the ratios are of ``s_per_tree``, measured back to back).

A multi-class data set (``--dataset synth_mc11 --objective multi:softmax``) compares the two
ways of growing its trees instead: ``per_class`` (one tree per class per round, ``--trees``
rounds, default 25) and ``multi_output`` (one tree with vector leaves per round, SBT-MO), as
many rounds as the plaintext core's multi-output model needs to reach ``per_class``'s test
accuracy (at most ``--trees``; the federated model is the core's, so the core finds the count
and the federation is timed for exactly that many rounds; ``core_accuracy`` also says at
which round, up to four times the cap, the core's multi-output model would reach it, and
``xgboost_accuracy`` the same for XGBoost's two tree strategies, measured in the same run). Last
line: ``{"benchmark": "modes", "dataset", "objective", "classes", ..., "core_accuracy",
"per_class": {...}, "multi_output": {...}, "multi_output_over_per_class"}`` with
``{"rounds", "trees", "total_s", "accuracy", "bytes", "identical_to_core"}`` each (the ratio
is of ``total_s``, measured back to back).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table
from benchmarks._hetero_lossless import compare_trees
from benchmarks.hetero import GUEST, run_federation
from benchmarks.lossless import DATASETS, HeteroSplit, Task, load_hetero_split
from p2pboost import certs
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.metrics import accuracy, auc
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.modes import FeatureSchedule
from p2pboost.workers import default_workers

__all__ = ["main"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks modes", description=__doc__)
    ap.add_argument("--dataset", required=True, choices=DATASETS)
    ap.add_argument("--trees", type=int, default=None, help="rounds (10; multi-class: 25)")
    ap.add_argument(
        "--objective",
        choices=["binary:logistic", "multi:softmax"],
        default=None,
        help="the data set's (checked): binary runs the modes, multi-class the tree kinds",
    )
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--key-bits", type=int, default=1024, choices=[1024, 2048, 3072])
    ap.add_argument("--host-depth", type=int, default=2)
    ap.add_argument("--per-party", type=int, default=1, help="mix mode's tree_num_per_party")
    ap.add_argument("--complete-secure", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--bins", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    objective = {Task.BINARY: "binary:logistic", Task.MULTICLASS: "multi:softmax"}.get(split.task)
    if objective is None or args.objective not in (None, objective):
        ap.error(f"{args.dataset} is a {split.task} task, not {args.objective or 'a classifier'}")
    blocks = np.array_split(np.arange(split.host_train.shape[1]), args.hosts)
    if split.task is Task.MULTICLASS:
        return _tree_kinds(args, split, blocks)
    args.trees = args.trees or 10
    if not 0 < args.host_depth < args.depth:
        ap.error("--host-depth must leave the guest at least one layer")
    params = BoostParams(
        n_estimators=args.trees, max_depth=args.depth, max_bin=args.bins, learning_rate=args.lr
    ).validate()
    workers = args.workers or default_workers()
    sizes = (split.guest_train.shape[1], *(b.size for b in blocks))
    modes: dict[str, dict[str, int]] = {
        "std": {},
        "mix": {"tree_num_per_party": args.per_party},
        "layered": {"host_depth": args.host_depth, "guest_depth": args.depth - args.host_depth},
        "complete_secure": {"complete_secure": args.complete_secure},
    }
    out: dict[str, Any] = {
        "benchmark": "modes",
        "dataset": args.dataset,
        "rows": int(split.y_train.size),
        "trees": args.trees,
        "depth": args.depth,
        "key_bits": args.key_bits,
        "hosts": args.hosts,
    }
    rows: list[tuple[str, Any]] = []
    for name, settings in modes.items():
        with tempfile.TemporaryDirectory(prefix="p2pboost-modes-") as tmp:
            fed = Path(tmp)
            certs.init(fed, [GUEST, *(f"host{k}" for k in range(1, args.hosts + 1))])
            result = run_federation(
                fed, split, blocks, params, key_bits=args.key_bits, workers=workers, modes=settings
            )
        guest = GuestModel.from_dict(result.guest["model"])
        hosts = [HostModel.from_dict(h["model"]) for h in result.hosts]
        schedule = FeatureSchedule(sizes, **settings)
        core = train(
            params,
            np.hstack([split.guest_train, *(split.host_train[:, b] for b in blocks)]),
            split.y_train,
            features_by_round=schedule.by_round(),
            features_by_depth=schedule.by_depth(),
        )
        n_trees = max(1, len(guest.trees))
        run = {
            "s_per_tree": round(result.guest["seconds"] / n_trees, 4),
            "auc": round(float(auc(split.y_test, result.guest["proba"])), 6),
            "bytes_per_tree": int(result.guest["bytes"] / n_trees),
            "identical_to_core": compare_trees(joined_trees(guest, hosts), core.trees),
        }
        out[name] = run
        rows.append((name, "  ".join(f"{k} {v}" for k, v in run.items())))
    out["mix_over_std"] = round(out["mix"]["s_per_tree"] / out["std"]["s_per_tree"], 4)
    out["layered_over_std"] = round(out["layered"]["s_per_tree"] / out["std"]["s_per_tree"], 4)
    rows += [("mix / std", out["mix_over_std"]), ("layered / std", out["layered_over_std"])]
    print_table(rows, f"vertical modes on {args.dataset} ({args.key_bits}-bit keys)")
    emit_json(out)
    return 0


def _xgboost_tree_kinds(params: BoostParams, split: HeteroSplit, rounds: int) -> dict[str, Any]:
    """XGBoost's two tree strategies on the same split and settings (``hist``, same bins,
    depth, learning rate, lambda): whether its multi-output trees reach its per-class trees'
    accuracy in ``rounds`` rounds, and at which round (up to four times as many) they do."""
    import xgboost

    def fit(strategy: str, n: int) -> Any:
        model = xgboost.XGBClassifier(
            n_estimators=n,
            max_depth=params.max_depth,
            learning_rate=params.learning_rate,
            reg_lambda=params.reg_lambda,
            max_bin=params.max_bin,
            tree_method="hist",
            multi_strategy=strategy,
            n_jobs=1,
        )
        return model.fit(split.X_train, split.y_train.astype(np.int64))

    def acc(model: Any, n: int) -> float:
        return accuracy(split.y_test, model.predict_proba(split.X_test, iteration_range=(0, n)))

    target = acc(fit("one_output_per_tree", rounds), rounds)
    vector = fit("multi_output_tree", 4 * rounds)
    staged = [acc(vector, r) for r in range(1, 4 * rounds + 1)]
    reach = next((r for r, a in enumerate(staged, 1) if a >= target), None)
    return {
        "per_class": round(target, 6),
        "multi_output": round(staged[rounds - 1], 6),
        "multi_output_rounds_to_reach_per_class": reach,
    }


def _tree_kinds(args: argparse.Namespace, split: HeteroSplit, blocks: list[np.ndarray]) -> int:
    """``per_class`` against ``multi_output`` on a multi-class set (module docstring)."""
    rounds = args.trees or 25
    per_class = BoostParams(
        objective="multi:softmax",
        num_class=split.n_classes,
        n_estimators=rounds,
        max_depth=args.depth,
        max_bin=args.bins,
        learning_rate=args.lr,
    ).validate()
    vector = replace(per_class, multi_strategy="multi_output_tree")
    workers = args.workers or default_workers()
    X_train, X_test = split.X_train, split.X_test
    pc_core = train(per_class, X_train, split.y_train)
    target = accuracy(split.y_test, pc_core.predict(X_test))
    # The core's multi-output model, staged: the rounds the federation gets (the first to
    # reach per_class's accuracy, at most --trees), and, beyond the cap, where it would.
    mo_core = train(replace(vector, n_estimators=4 * rounds), X_train, split.y_train)
    staged = [accuracy(split.y_test, mo_core.predict(X_test, r)) for r in range(1, 4 * rounds + 1)]
    reach = next((r for r, acc in enumerate(staged, 1) if acc >= target), None)
    needed = reach if reach is not None and reach <= rounds else rounds
    out: dict[str, Any] = {
        "benchmark": "modes",
        "dataset": args.dataset,
        "objective": "multi:softmax",
        "classes": split.n_classes,
        "rows": int(split.y_train.size),
        "depth": args.depth,
        "key_bits": args.key_bits,
        "hosts": args.hosts,
        "core_accuracy": {
            "per_class": round(target, 6),
            "multi_output": round(staged[rounds - 1], 6),
            "multi_output_rounds_to_reach_per_class": reach,
        },
        "xgboost_accuracy": _xgboost_tree_kinds(per_class, split, rounds),
    }
    table: list[tuple[str, Any]] = []
    for name, params in (
        ("per_class", per_class),
        ("multi_output", replace(vector, n_estimators=needed)),
    ):
        with tempfile.TemporaryDirectory(prefix="p2pboost-modes-") as tmp:
            fed = Path(tmp)
            certs.init(fed, [GUEST, *(f"host{k}" for k in range(1, args.hosts + 1))])
            result = run_federation(
                fed, split, blocks, params, key_bits=args.key_bits, workers=workers
            )
        guest = GuestModel.from_dict(result.guest["model"])
        hosts = [HostModel.from_dict(h["model"]) for h in result.hosts]
        core = train(params, X_train, split.y_train)
        run = {
            "rounds": params.n_estimators,
            "trees": len(guest.trees),
            "total_s": round(result.guest["seconds"], 3),
            "accuracy": round(accuracy(split.y_test, result.guest["proba"]), 6),
            "bytes": int(result.guest["bytes"]),
            "identical_to_core": compare_trees(joined_trees(guest, hosts), core.trees),
        }
        out[name] = run
        table.append((name, "  ".join(f"{k} {v}" for k, v in run.items())))
    ratio = out["multi_output"]["total_s"] / out["per_class"]["total_s"]
    out["multi_output_over_per_class"] = round(ratio, 4)
    table.append(("multi_output / per_class", out["multi_output_over_per_class"]))
    print_table(table, f"tree kinds on {args.dataset} ({args.key_bits}-bit keys)")
    emit_json(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
