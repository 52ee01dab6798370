"""Differential privacy: DPBoost against its baselines SEQ and PARA and the non-private model.

``python -m benchmarks dp --dataset default_credit --trees 50 --depth 4 [--epsilons
0.5,1,2,5,10 --seeds 100 --lr 0.1 --trees-per-ensemble 50 --data-dir DIR]``

The data are the joined vertical files, split 2/3 : 1/3 as the lossless benchmark splits them
(:func:`benchmarks.lossless.load_hetero_split`). Every mechanism trains with the same trees,
depth, bins and learning rate, at every epsilon, once per seed (the seed drives the noise
stream, ``dp.noise_seed``, and the column draws); the median test metric over the seeds is
reported. Regression labels are mapped to [-1, 1] by their *public* range (student: grades
0..20), as DPBoost's bounded-label assumption asks; the RMSE is on that scale.

A seed gives every mechanism the same noise stream and the same row keys (the draws fall on the
same candidates and leaves wherever the trees' shapes agree), so the mechanisms are compared
seed by seed: ``margin`` is DPBoost's median minus a baseline's (positive: DPBoost better, in
the metric's direction) and ``margin_ci95`` its 95 % bootstrap interval, resampling the seeds
jointly for both; ``ci95`` holds each median's own interval. A margin whose interval holds 0
is not resolved by this many seeds: the order of the medians is then the seeds' luck. On
student (263 training rows) the median of 10 seeds varies by about 0.008 RMSE (standard
deviation over disjoint sets of seeds), several times what DPBoost and PARA differ by; hence
the default of 100 seeds.

Last line: ``{"benchmark": "dp", "dataset", "metric", "higher_is_better", "epsilons",
"dpboost", "seq", "para", "ci95", "margin", "margin_ci95", "nonprivate", "filtered_rows"}``
and the settings; ``filtered_rows`` is the median over seeds of the rows DPBoost's gradient
filter left out (summed over its trees) at the smallest epsilon, as training counts it (the
model's ``filtered_rows``: a noiseless count of the rows, which model files do not hold).
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
BASELINES = ("seq", "para")
#: Bootstrap resamples of the seeds for the intervals (a fixed stream: the figures repeat).
RESAMPLES = 2000


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


def _ci(values: np.ndarray) -> list[float]:
    """The 2.5 and 97.5 percentiles of bootstrap statistics, rounded as the medians are."""
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [round(float(lo), 6), round(float(hi), 6)]


def _intervals(
    scores: dict[str, np.ndarray], higher_is_better: bool, seeds: int
) -> tuple[dict[str, list[float]], dict[str, float], dict[str, list[float]]]:
    """At one epsilon, from ``(seeds,)`` scores per mechanism: each median's interval,
    DPBoost's margin over each baseline and the margin's interval (seeds resampled jointly,
    so the pairing by seed is kept)."""
    picks = np.random.default_rng(0).integers(0, seeds, size=(RESAMPLES, seeds))
    boot = {m: np.median(scores[m][picks], axis=1) for m in MECHANISMS}
    sign = 1.0 if higher_is_better else -1.0
    ci = {m: _ci(boot[m]) for m in MECHANISMS}
    margin = {
        b: round(sign * float(np.median(scores["dpboost"]) - np.median(scores[b])), 6)
        for b in BASELINES
    }
    margin_ci = {b: _ci(sign * (boot["dpboost"] - boot[b])) for b in BASELINES}
    return ci, margin, margin_ci


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks dp", description=__doc__)
    ap.add_argument("--dataset", default="default_credit")
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--bins", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--epsilons", default="0.5,1,2,5,10")
    ap.add_argument("--seeds", type=int, default=100)
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
    ci95: dict[str, list[list[float]]] = {m: [] for m in MECHANISMS}
    margin: dict[str, list[float]] = {b: [] for b in BASELINES}
    margin_ci95: dict[str, list[list[float]]] = {b: [] for b in BASELINES}
    filtered: list[int] = []
    for eps in epsilons:
        per_seed: dict[str, np.ndarray] = {}
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
                    assert model.filtered_rows is not None  # the trainer's, not in the file
                    filtered.append(model.filtered_rows)
            per_seed[mech] = np.array(scores)
            results[mech].append(round(statistics.median(scores), 6))
        ci, diff, diff_ci = _intervals(per_seed, binary, args.seeds)
        for mech in MECHANISMS:
            ci95[mech].append(ci[mech])
        for b in BASELINES:
            margin[b].append(diff[b])
            margin_ci95[b].append(diff_ci[b])
    metric = "auc" if binary else "rmse"
    rows: list[tuple[str, Any]] = [("rows (train)", int(y_train.size)), ("nonprivate", nonprivate)]
    for i, eps in enumerate(epsilons):
        rows.append(
            (
                f"eps={eps:g}",
                "  ".join(
                    f"{m} {results[m][i]:.4f} [{ci95[m][i][0]:.4f}, {ci95[m][i][1]:.4f}]"
                    for m in MECHANISMS
                ),
            )
        )
        rows.append(
            (
                "  dpboost margin",
                "  ".join(
                    f"over {b} {margin[b][i]:+.4f} "
                    f"[{margin_ci95[b][i][0]:+.4f}, {margin_ci95[b][i][1]:+.4f}]"
                    for b in BASELINES
                ),
            )
        )
    print_table(
        rows,
        f"DPBoost vs SEQ and PARA on {args.dataset} ({metric}, median of {args.seeds} "
        "seeds [95 % bootstrap interval]; margin > 0: DPBoost better)",
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
            "ci95": ci95,
            "margin": margin,
            "margin_ci95": margin_ci95,
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
