"""Wide, sparse host data: what the host's sparse path and column sampling save.

``python -m benchmarks wide --dataset synth_wide --trees 3 --depth 4 --key-bits 1024
[--bins 32 --lr 0.3 --colsample 0.2 --workers 2 --seed 0 --memory-budget-mb M --data-dir DIR]``

``synth_wide`` (10,000 rows; the guest 20 dense features and the label, the host 1,000
features, 95 % zeros) is split 2/3 : 1/3 as in ``lossless``. The guest and the host train in
this process over the in-memory transport (real codec, crypto and protocol; the host's row
shards in a pinned pool of ``--workers`` processes) three times, back to back:

* ``dense``: the host sums every row of every feature (``host_train(sparse=False)``);
* ``sparse``: the host derives each sparse feature's common bin from the node total
  (``sparse="auto"``, the default);
* ``colsample``: as ``sparse``, with ``colsample_bytree = --colsample``: the host accumulates
  only the features a tree samples;
* ``budget`` (with ``--memory-budget-mb M``): as ``sparse``, the host's histograms kept
  between layers bounded by ``M`` MiB (``host_train(memory_budget_mb=M)``).

``host_hist_peak_mb_*``: the largest measured size of the host's cached encrypted histograms
in one tree (each shard measures the integer objects it holds; summed over the shards' peaks):
0 where the guest derives every split's larger child, so that nothing is kept between layers
(trees without per-node column draws); the histogram a shard is building is not counted.

``host_additions_*`` are the ciphertext additions (products) of the host's histogram builds over
the whole run (``Progress.additions``: every shard, every tree); ``s_per_tree_*`` the guest's
wall time per tree; ``identical_trees``: each run's joined trees equal the plaintext core's on the
joined training rows (with the same parameters).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

from benchmarks._common import data_dir, emit_json, print_table
from benchmarks._hetero_lossless import compare_trees, run_federation
from benchmarks.lossless import _params, load_hetero_split
from p2pboost.gbdt.booster import train
from p2pboost.hetero.model import joined_trees
from p2pboost.hetero.training.common import HostPhase, Progress

__all__ = ["main"]

DATASETS = ["synth_wide"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks wide",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--key-bits", type=int, default=1024, choices=[1024, 2048, 3072])
    parser.add_argument("--trees", type=int, default=3)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--colsample", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--memory-budget-mb", type=float, default=None, help="adds a run with this host budget"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if not 0 < args.colsample <= 1:
        parser.error("--colsample must be in (0, 1]")
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    base = _params(args, split)
    runs: dict[str, tuple[Any, Any, float | None]] = {
        "dense": (base, False, None),
        "sparse": (base, "auto", None),
        "colsample": (dataclasses.replace(base, colsample_bytree=args.colsample), "auto", None),
    }
    if args.memory_budget_mb is not None:
        runs["budget"] = (base, "auto", args.memory_budget_mb)
    measured: dict[str, dict[str, Any]] = {}
    for name, (params, sparse, budget) in runs.items():
        progress = Progress(HostPhase.SETUP)
        host = {"sparse": sparse, "progress": progress, "memory_budget_mb": budget}
        guest_model, host_models, _, seconds = asyncio.run(
            run_federation(
                split.guest_train,
                split.y_train,
                [split.host_train],
                split.guest_test,
                [split.host_test],
                params,
                key_bits=args.key_bits,
                workers=args.workers,
                host_kwargs=[host],
            )
        )
        core = train(params, split.X_train, split.y_train)
        measured[name] = {
            "additions": progress.additions,
            "hist_peak_mb": round(progress.hist_peak_bytes / 2**20, 4),
            "s_per_tree": seconds / max(1, len(guest_model.trees)),
            "identical": compare_trees(joined_trees(guest_model, host_models), core.trees),
        }
    dense, sparse_run, col = measured["dense"], measured["sparse"], measured["colsample"]
    result = {
        "benchmark": "wide",
        "dataset": args.dataset,
        "rows": int(split.y_train.size),
        "host_features": int(split.host_train.shape[1]),
        "key_bits": args.key_bits,
        "host_additions_dense": dense["additions"],
        "host_additions_sparse": sparse_run["additions"],
        "host_additions_colsample": col["additions"],
        "s_per_tree_dense": round(dense["s_per_tree"], 4),
        "s_per_tree_sparse": round(sparse_run["s_per_tree"], 4),
        "s_per_tree_colsample": round(col["s_per_tree"], 4),
        "host_hist_peak_mb_sparse": sparse_run["hist_peak_mb"],
        "identical_trees": all(m["identical"] for m in measured.values()),
    }
    budgeted = measured.get("budget")
    if budgeted is not None:
        result |= {
            "memory_budget_mb": args.memory_budget_mb,
            "host_hist_peak_mb_budget": budgeted["hist_peak_mb"],
            "host_additions_budget": budgeted["additions"],
            "s_per_tree_budget": round(budgeted["s_per_tree"], 4),
            "under_budget": budgeted["hist_peak_mb"] <= args.memory_budget_mb,
        }
    zeros = float((split.host_train == 0).mean())
    print_table(
        [
            ("dataset / training rows", f"{args.dataset} / {result['rows']}"),
            ("guest / host features", f"{split.guest_train.shape[1]} / {result['host_features']}"),
            ("host values that are 0", zeros),
            (
                "trees / depth / bins / key bits",
                f"{args.trees} / {args.depth} / {args.bins} / {args.key_bits}",
            ),
            ("host additions, dense", dense["additions"]),
            ("host additions, sparse", sparse_run["additions"]),
            ("  dense / sparse", dense["additions"] / max(1, sparse_run["additions"])),
            (f"host additions, sparse + colsample {args.colsample}", col["additions"]),
            ("  colsample / dense", col["additions"] / max(1, dense["additions"])),
            (
                "s/tree dense / sparse / colsample",
                " / ".join(f"{m['s_per_tree']:.3f}" for m in measured.values()),
            ),
            ("  sparse / dense", sparse_run["s_per_tree"] / dense["s_per_tree"]),
            ("host histogram peak MiB, sparse", sparse_run["hist_peak_mb"]),
            *(
                []
                if budgeted is None
                else [
                    (
                        f"  with a {args.memory_budget_mb:g} MiB budget",
                        f"{budgeted['hist_peak_mb']} (additions {budgeted['additions']})",
                    )
                ]
            ),
            ("identical trees (each run = plaintext core)", result["identical_trees"]),
        ],
        f"wide sparse host data, {args.dataset}",
    )
    emit_json(result)
    return 0
