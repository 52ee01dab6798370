"""A million rows on one machine: vertical training's time against its floor, and its memory.

``python -m benchmarks scale --rows 1000000 --features 10 --trees 1 --depth 4 --key-bits 1024
[--test-rows 10000 --bins 32 --workers W --seed 0 --bandwidth-gbps 10 --trace-workers N]``

The data are synthetic, generated here from ``--seed``: ``--features`` standard normal columns,
the first half the guest's (with a 0/1 label from a logistic model of all of them), the rest
the host's. Guest and host train as separate processes over TLS WebSockets on 127.0.0.1 by the
``hetero`` benchmark's own runner (:func:`benchmarks.hetero._run_scheme`), which also times the
cost model for ``floor_s_per_tree``. While they run, a thread here samples every 0.2 s the
resident memory of every process below this one (the guest, the host and their workers) from
``/proc`` and keeps the largest sum: ``peak_rss_mb_total``.

``scaling``: the run's pool tasks, traced in both parties, replayed with each party on a
machine of its own with 8 to 64 workers (:mod:`benchmarks._schedule`; ``--trace-workers N``
has the parties cut their work for ``N`` workers, see the ``hetero`` benchmark).

Last line: ``{"benchmark": "scale", "rows", "features", "key_bits", "s_per_tree",
"floor_s_per_tree", "peak_rss_mb_total", "bytes_per_tree", "auc", "scaling": {"8":
{"s_per_tree", "efficiency", "path"}, "16": ..., "32": ..., "64": ...}}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _scaling
from benchmarks._common import emit_json, print_table
from benchmarks.hetero import _run_scheme
from benchmarks.lossless import HeteroSplit, Task
from p2pboost.gbdt.params import BoostParams
from p2pboost.workers import default_workers

__all__ = ["main"]


def _synthetic(rows: int, test_rows: int, features: int, seed: int) -> HeteroSplit:
    rng = np.random.default_rng(seed)
    n = rows + test_rows
    X = rng.standard_normal((n, features))
    w = rng.standard_normal(features)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ w)))).astype(np.float64)
    half = features // 2
    tr, te = slice(0, rows), slice(rows, n)
    return HeteroSplit(
        X[tr, :half], X[tr, half:], y[tr], X[te, :half], X[te, half:], y[te], Task.BINARY, 2
    )


class _RssSampler(threading.Thread):
    """The largest summed RSS of this process's descendants, sampled from /proc."""

    def __init__(self, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.peak_kib = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self._stop_event.wait(self.every):
            self.peak_kib = max(self.peak_kib, _descendants_rss_kib(me))

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _descendants_rss_kib(root: int) -> int:
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry.name)] = int(fields[1])
    below = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in below and pid not in below:
                below.add(pid)
                changed = True
    total = 0
    for pid in below - {root}:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=10_000)
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--trees", type=int, default=1)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--bins", type=int, default=32)
    ap.add_argument("--key-bits", type=int, default=1024, choices=[1024, 2048, 3072])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    _scaling.add_bandwidth_argument(ap)
    _scaling.add_trace_workers_argument(ap)
    args = ap.parse_args(argv)
    if args.features < 2 or args.rows < 2:
        ap.error("--features and --rows must be at least 2")
    if args.trace_workers is not None and args.trace_workers < 1:
        ap.error("--trace-workers must be at least 1")
    split = _synthetic(args.rows, args.test_rows, args.features, args.seed)
    params = BoostParams(n_estimators=args.trees, max_depth=args.depth, max_bin=args.bins)
    workers = args.workers or default_workers()
    runner = argparse.Namespace(
        key_bits=args.key_bits,
        depth=args.depth,
        bins=args.bins,
        hosts=1,
        bandwidth_gbps=args.bandwidth_gbps,
        trace_workers=args.trace_workers,
    )
    blocks = [np.arange(split.host_train.shape[1])]
    sampler = _RssSampler()
    sampler.start()
    try:
        run = _run_scheme(runner, split, blocks, params.validate(), "paillier", workers)
    finally:
        sampler.stop()
    out: dict[str, Any] = {
        "benchmark": "scale",
        "rows": args.rows,
        "features": args.features,
        "key_bits": args.key_bits,
        "s_per_tree": round(run.s_per_tree, 4),
        "floor_s_per_tree": round(run.floor, 4),
        "peak_rss_mb_total": round(sampler.peak_kib / 1024, 1),
        "bytes_per_tree": int(run.bytes_per_tree),
        "auc": round(run.auc, 6),
        "scaling": run.prediction.scaling,
    }
    rows: list[tuple[str, Any]] = [
        (k, v) for k, v in out.items() if k not in ("benchmark", "scaling")
    ]
    rows.append(("s_per_tree / floor", round(run.s_per_tree / run.floor, 3)))
    rows += _scaling.rows("", run.prediction, run.s_per_tree, "tree")
    print_table(rows, f"vertical SecureBoost at {args.rows} rows (guest + host processes)")
    emit_json(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
