"""Differential privacy: DPBoost against its baselines SEQ and PARA and the non-private model.

``python -m benchmarks dp --dataset default_credit --trees 50 --depth 4 [--epsilons
0.5,1,2,5,10 --seeds 10 --lr 0.1 --trees-per-ensemble 50 --data-dir DIR]``

The data are the joined vertical files, split 2/3 : 1/3 as the lossless benchmark splits them
(:func:`benchmarks.lossless.load_hetero_split`). Every mechanism trains with the same trees,
depth, bins and learning rate, at every epsilon, once per seed (the seed drives the noise
stream, ``dp.noise_seed``, and the column draws); the median test metric over the seeds is
reported. Regression labels are mapped to [-1, 1] by their *public* range (student: grades
0..20), as DPBoost's bounded-label assumption asks; the RMSE is on that scale.

Last line: ``{"benchmark": "dp", "dataset", "metric", "higher_is_better", "epsilons",
"dpboost", "seq", "para", "nonprivate", "filtered_rows"}``; ``filtered_rows`` is the median
over seeds of the rows DPBoost's gradient filter left out (summed over its trees) at the
smallest epsilon.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table
from benchmarks.lossless import HeteroSplit, Task, load_hetero_split
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.metrics import auc, rmse
from p2pboost.gbdt.params import BoostParams, DPParams

__all__ = ["main"]

#: The public label range of the regression sets (from the data's documentation).
LABEL_RANGE = {"student": (0.0, 20.0)}
MECHANISMS = ("dpboost", "seq", "para")


def _scaled(split: HeteroSplit, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    if split.task is Task.BINARY:
        return split.y_train, split.y_test
    if split.task is not Task.REGRESSION or dataset not in LABEL_RANGE:
        raise SystemExit(
            f"{dataset}: DP needs a binary task or a regression set with a known range"
        )
    lo, hi = LABEL_RANGE[dataset]
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    return (split.y_train - mid) / half, (split.y_test - mid) / half


def _score(split: HeteroSplit, y_test: np.ndarray, model: Any) -> float:
    pred = model.predict(split.X_test)
    return float(auc(y_test, pred) if split.task is Task.BINARY else rmse(y_test, pred))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks dp", description=__doc__)
    ap.add_argument("--dataset", default="default_credit")
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--bins", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--epsilons", default="0.5,1,2,5,10")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trees-per-ensemble", type=int, default=DPParams().trees_per_ensemble)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    y_train, y_test = _scaled(split, args.dataset)
    binary = split.task is Task.BINARY
    base = BoostParams(
        objective="binary:logistic" if binary else "reg:squarederror",
        n_estimators=args.trees,
        max_depth=args.depth,
        max_bin=args.bins,
        learning_rate=args.lr,
    ).validate()
    X = split.X_train
    nonprivate = _score(split, y_test, train(base, X, y_train))
    results: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    filtered: list[int] = []
    for eps in epsilons:
        for mech in MECHANISMS:
            scores = []
            for seed in range(args.seeds):
                dp = {
                    "epsilon": eps,
                    "mechanism": mech,
                    "trees_per_ensemble": args.trees_per_ensemble,
                    "noise_seed": seed,
                }
                model = train(base.with_updates(seed=seed, dp=dp), X, y_train)
                scores.append(_score(split, y_test, model))
                if mech == "dpboost" and eps == epsilons[0]:
                    assert model.privacy is not None
                    filtered.append(int(model.privacy["filtered_rows"]))
            results[mech].append(round(statistics.median(scores), 6))
    metric = "auc" if binary else "rmse"
    rows: list[tuple[str, Any]] = [("rows (train)", int(y_train.size)), ("nonprivate", nonprivate)]
    for i, eps in enumerate(epsilons):
        rows.append((f"eps={eps:g}", "  ".join(f"{m} {results[m][i]:.4f}" for m in MECHANISMS)))
    print_table(
        rows, f"DPBoost vs SEQ and PARA on {args.dataset} ({metric}, median of {args.seeds})"
    )
    emit_json(
        {
            "benchmark": "dp",
            "dataset": args.dataset,
            "metric": metric,
            "higher_is_better": binary,
            "epsilons": epsilons,
            "dpboost": results["dpboost"],
            "seq": results["seq"],
            "para": results["para"],
            "nonprivate": round(nonprivate, 6),
            "filtered_rows": int(statistics.median(filtered)) if filtered else 0,
            "trees": args.trees,
            "depth": args.depth,
            "learning_rate": args.lr,
            "trees_per_ensemble": args.trees_per_ensemble,
            "seeds": args.seeds,
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
