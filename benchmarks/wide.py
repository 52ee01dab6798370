"""Wide, sparse host data: what the host's sparse path and column sampling save.

``python -m benchmarks wide --dataset synth_wide --trees 3 --depth 4 --key-bits 1024
[--bins 32 --lr 0.3 --colsample 0.2 --workers 2 --seed 0 --data-dir DIR]``

``synth_wide`` (10,000 rows; the guest 20 dense features and the label, the host 1,000
features, 95 % zeros) is split 2/3 : 1/3 as in ``lossless``. The guest and the host train in
this process over the in-memory transport (real codec, crypto and protocol; the host's row
shards in a pinned pool of ``--workers`` processes) three times, back to back:

* ``dense``: the host sums every row of every feature (``host_train(sparse=False)``);
* ``sparse``: the host derives each sparse feature's common bin from the node total
  (``sparse="auto"``, the default);
* ``colsample``: as ``sparse``, with ``colsample_bytree = --colsample``: the host accumulates
  only the features a tree samples.

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
from p2pboost.hetero._common import HostPhase, Progress
from p2pboost.hetero.model import joined_trees

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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if not 0 < args.colsample <= 1:
        parser.error("--colsample must be in (0, 1]")
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    base = _params(args, split)
    runs: dict[str, tuple[Any, Any]] = {
        "dense": (base, False),
        "sparse": (base, "auto"),
        "colsample": (dataclasses.replace(base, colsample_bytree=args.colsample), "auto"),
    }
    measured: dict[str, dict[str, Any]] = {}
    for name, (params, sparse) in runs.items():
        progress = Progress(HostPhase.SETUP)
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
                host_kwargs=[{"sparse": sparse, "progress": progress}],
            )
        )
        core = train(params, split.X_train, split.y_train)
        measured[name] = {
            "additions": progress.additions,
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
        "identical_trees": all(m["identical"] for m in measured.values()),
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
            ("identical trees (each run = plaintext core)", result["identical_trees"]),
        ],
        f"wide sparse host data, {args.dataset}",
    )
    emit_json(result)
    return 0
