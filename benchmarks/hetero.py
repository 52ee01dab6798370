"""Hetero SecureBoost end to end: guest and hosts as separate processes over WebSocket + mTLS.

``python -m benchmarks hetero --dataset synth150k --trees 5 --depth 5 --key-bits 1024
[--hosts 1] [--bins 32 --lr 0.3 --seed 0 --workers W --rows N --data-dir DIR]
[--scheme paillier|ou | --compare-schemes] [--compare-kernels]
[--bandwidth-gbps 10 --trace-workers N]``

The guest holds ``NAME_hetero_guest.csv`` (labels and its features); the host features of
``NAME_hetero_host.csv`` go to one host, or are split column-wise into ``--hosts`` contiguous
blocks (host 1 first), as in ``lossless --mode hetero``. Rows are joined on ``id`` and split
2/3 : 1/3 by :func:`benchmarks.lossless.load_hetero_split`; ``--rows N`` keeps only the first
``N`` training rows (the test rows stay).

Every party is its own spawned process with its own node, its own pool of ``--workers``
crypto workers (default: one per core; a host's is a :class:`~p2pboost.workers.PinnedPool`,
where its row shards of ciphertexts live) and a throw-away certificate from a federation CA;
they talk over TLS 1.3 WebSockets on 127.0.0.1 (the hosts listen, the guest, whose id sorts
first, dials). So the run pays for what a real deployment pays: encoding,
framing, TLS, the kernel's loopback and the parties competing for the same cores.

What is timed, and what is not:

* ``s_per_tree``: the guest's wall time inside ``guest_train`` divided by the trees. The key
  pair is generated, the pools are started (warmed) and the guest's workers build the key's
  fixed-base tables (:meth:`~p2pboost.crypto.engine.CryptoEngine.prepare`) *before* that, as
  a party that has its keys before its partners are ready would have them; each is reported
  on its own line of the table, the tables also as ``tables_s`` (add it to the trees' time
  for a party that makes its key on the spot). While the guest waits
  for the host its pool makes the next tree's encryption randomisers on processors the host
  leaves idle (``HeteroConfig.precompute``), so from the second tree on part of the
  encryption is done ahead; all of it is inside the timed span.
* ``phases``: per party, the wall seconds spent in each protocol phase (a
  :class:`~p2pboost.hetero.training.common.Progress` that clocks every ``enter``). Wall
  time includes waiting for the other side, so a host's ``layer`` also holds the time the
  guest spends deciding. A host's clock starts when the guest's connection arrives.
* ``floor_s_per_tree``: DESIGN.md section 2's cost model (encryptions, ciphertext
  additions, compressions and decryptions per tree, each timed on one core in this run, once
  before and once after the federation, the cheaper of the two kept) divided by the cores:
  the time if every core did nothing but the unavoidable cryptography (see
  :class:`benchmarks._hetero_lossless.CostModel`).
* ``bytes_per_tree``: bytes the guest's node sent and received (all hosts, framing included)
  during training, divided by the trees.
* ``scaling``: every pool task of both parties while they train is recorded (the task
  trace, :mod:`p2pboost.workers._trace`) and replayed by list scheduling with each party on a
  machine of its own with 8, 16, 32 and 64 workers (:mod:`benchmarks._schedule` states the
  model): predicted seconds per tree, parallel efficiency and where the seconds go along the
  critical path (``path``: tasks, waits for a worker, the parties' own time, network).
  ``--trace-workers N`` has the parties cut their work for ``N`` workers (a host's shards, the
  engine's pieces) while they run it on ``--workers`` processes, so the trace holds the tasks
  of an ``N``-worker party.
* ``--compare-kernels``: each scheme with the ``native`` and the ``gmpy2`` crypto kernel,
  selected in the parties by ``P2PBOOST_KERNEL`` before they import p2pboost; the floor of a
  run is timed with its kernel (in a process started with the same setting), and each run
  reports the kernel its parties actually used.
* ``auc``: the federated model on the test rows through the one-round prediction protocol
  (:mod:`p2pboost.hetero.inference.batch`) over the same nodes; ``xgboost_auc``: xgboost
  ``hist`` with the same trees, depth, bins, learning rate and lambda, one thread, trained
  on the joined training rows in this run.

Binary labels only (the key is ``auc``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _scaling
from benchmarks._common import data_dir, emit_json, print_table
from benchmarks._hetero_lossless import CostModel, _candidates, _scored_nodes, compare_trees
from benchmarks._hetero_parties import (
    GUEST,
    KERNEL_ENV,
    KERNELS,
    PARTY_TIMEOUT,
    FederationResult,
    PhaseClock,
    active_kernel,
    environment,
    run_federation,
)
from benchmarks.lossless import (
    DATASETS,
    HeteroSplit,
    Task,
    _params,
    _predict_xgb,
    _xgboost_model,
    load_hetero_split,
)
from p2pboost import certs
from p2pboost.crypto.keys import SCHEMES
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.metrics import auc
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.workers import default_workers

__all__ = [
    "GUEST",
    "KERNEL_ENV",
    "PARTY_TIMEOUT",
    "PhaseClock",
    "environment",
    "main",
    "run_federation",
]


def _phases(result: FederationResult, n_hosts: int) -> dict[str, dict[str, float]]:
    names = [GUEST, *(f"host{k}" for k in range(1, n_hosts + 1))]
    reports: list[Mapping[str, Any]] = [result.guest, *result.hosts]
    return {
        name: {phase: round(float(s), 4) for phase, s in report["phases"].items()}
        for name, report in zip(names, reports, strict=True)
    }


def _least(a: CostModel, b: CostModel) -> CostModel:
    """Per operation the cheaper of two measurements (before and after the federation).

    The machine is shared, so a measurement can be slowed by someone else's work; the least
    cost is the closest to the uncontended one, which makes the floor the harder target.
    """
    return CostModel(
        encrypt=min(a.encrypt, b.encrypt),
        add=min(a.add, b.add),
        compress=min(a.compress, b.compress),
        decrypt=min(a.decrypt, b.decrypt),
        capacity=a.capacity,
    )


def _measured_in(kernel: str, key_bits: int, n_rows: int, scheme: str) -> tuple[CostModel, str]:
    """:meth:`CostModel.measure` in this process, and the kernel it used (run in a process
    started with the kernel selected: see :func:`_measure_costs`)."""
    return CostModel.measure(key_bits, n_rows, scheme=scheme), active_kernel()


def _measure_costs(key_bits: int, n_rows: int, scheme: str, kernel: str | None) -> CostModel:
    """The per-operation costs of the floor, timed with the parties' kernel.

    With no kernel chosen the parties use the one this process would (they inherit its
    environment), so it is timed here. A chosen kernel is selected when p2pboost is imported,
    so it is timed in a fresh process started with it (one process, one core: the same
    measurement; only its start-up is added, untimed)."""
    if kernel is None:
        return CostModel.measure(key_bits, n_rows, scheme=scheme)
    context = multiprocessing.get_context("spawn")
    with environment(**{KERNEL_ENV: kernel}), ProcessPoolExecutor(1, context) as one:
        costs, used = one.submit(_measured_in, kernel, key_bits, n_rows, scheme).result()
    if used != kernel:
        print(f"note: the floor for kernel {kernel!r} was timed with {used!r}, what p2pboost used")
    return costs


@dataclass(frozen=True)
class SchemeRun:
    """One federation under one scheme and kernel: what was measured, and the models."""

    scheme: str
    #: The kernel asked for (None: the default) and the one the parties used.
    kernel: str | None
    kernel_used: str
    #: What the parties' pools were made of (threads or processes; guest + hosts).
    pool_used: str
    s_per_tree: float
    floor: float
    costs: CostModel
    scored: float
    layers: float
    auc: float
    bytes_per_tree: float
    phases: dict[str, dict[str, float]]
    result: FederationResult
    trees: list[Tree]
    #: The run's task trace replayed on wider machines (benchmarks/_schedule.py).
    prediction: _scaling.Prediction

    @property
    def label(self) -> str:
        return self.scheme if self.kernel is None else f"{self.scheme}/{self.kernel}"

    def json(self) -> dict[str, Any]:
        return {
            "s_per_tree": round(self.s_per_tree, 4),
            "floor_s_per_tree": round(self.floor, 4),
            "tables_s": round(self.result.guest["tables"], 4),
            "auc": round(self.auc, 6),
            "bytes_per_tree": round(self.bytes_per_tree),
            "kernel": self.kernel_used,
            "pool": self.pool_used,
        }


def _run_scheme(
    args: argparse.Namespace,
    split: HeteroSplit,
    blocks: list[np.ndarray],
    params: BoostParams,
    scheme: str,
    workers: int,
    kernel: str | None = None,
) -> SchemeRun:
    """Cost model before, the federation (its pool tasks traced), cost model after (the
    cheaper kept per operation); ``kernel``: the crypto kernel of the parties and of the
    floor's timing (None: the default)."""
    n_rows = int(split.y_train.size)
    costs_before = _measure_costs(args.key_bits, n_rows, scheme, kernel)
    with tempfile.TemporaryDirectory(prefix="p2pboost-hetero-") as tmp:
        fed = Path(tmp) / "federation"
        trace = Path(tmp) / "trace"
        certs.init(fed, [GUEST, *(f"host{k}" for k in range(1, args.hosts + 1))])
        result = run_federation(
            fed,
            split,
            blocks,
            params,
            key_bits=args.key_bits,
            workers=workers,
            scheme=scheme,
            trace=str(trace),
            kernel=kernel,
            cut=getattr(args, "trace_workers", None),
        )
        g = result.guest
        model = GuestModel.from_dict(g["model"])
        n_trees = max(1, len(model.trees))
        start, stop = g["wall"]
        prediction = _scaling.predict(
            trace,
            start=start,
            stop=stop,
            units=n_trees,
            workers=getattr(args, "trace_workers", None) or workers,
            bandwidth=_scaling.bandwidth(getattr(args, "bandwidth_gbps", _scaling.DEFAULT_GBPS)),
        )
    hosts = [HostModel.from_dict(h["model"]) for h in result.hosts]
    costs = _least(costs_before, _measure_costs(args.key_bits, n_rows, scheme, kernel))
    scored, layers = _scored_nodes(model, args.depth)
    floor = costs.floor(
        n_rows,
        split.host_train.shape[1],
        round(layers),
        round(scored),
        _candidates(split.host_train, args.bins),
        default_workers(),
    )
    used = {g["kernel"], *(h["kernel"] for h in result.hosts)}
    return SchemeRun(
        scheme=scheme,
        kernel=kernel,
        kernel_used="+".join(sorted(used)),
        pool_used="+".join(sorted({g["pool"], *(h["pool"] for h in result.hosts)})),
        s_per_tree=g["seconds"] / n_trees,
        floor=floor,
        costs=costs,
        scored=scored,
        layers=layers,
        auc=float(auc(split.y_test, g["proba"])),
        bytes_per_tree=g["bytes"] / n_trees,
        phases=_phases(result, args.hosts),
        result=result,
        trees=joined_trees(model, hosts),
        prediction=prediction,
    )


def _rows(run: SchemeRun) -> list[tuple[str, Any]]:
    c = run.costs
    rows: list[tuple[str, Any]] = [
        (f"[{run.label}] crypto kernel used (guest + hosts)", run.kernel_used),
        (f"[{run.label}] workers are (guest + hosts)", run.pool_used),
        (f"[{run.label}] guest key generation s (not timed)", run.result.guest["keygen"]),
        (f"[{run.label}] guest workers' tables s (not timed)", run.result.guest["tables"]),
        (f"[{run.label}] federated s/tree (guest wall)", run.s_per_tree),
        (f"[{run.label}] floor s/tree (cost model / cores)", run.floor),
        (f"[{run.label}] s_per_tree / floor_s_per_tree", run.s_per_tree / run.floor),
        (
            f"[{run.label}]   encrypt / add / compress / decrypt (us)",
            " / ".join(f"{1e6 * v:.1f}" for v in (c.encrypt, c.add, c.compress, c.decrypt)),
        ),
        (f"[{run.label}]   split-infos per decryption", c.capacity),
        (
            f"[{run.label}]   scored nodes / layers per tree",
            f"{run.scored:.1f} / {run.layers:.1f}",
        ),
    ]
    for party, per_phase in run.phases.items():
        total = sum(per_phase.values())
        shown = ", ".join(f"{k} {v:.2f}" for k, v in per_phase.items())
        rows.append((f"[{run.label}] {party} phases s (total {total:.2f})", shown))
    rows += [
        (f"[{run.label}] MB per tree (guest sent + received)", run.bytes_per_tree / 1e6),
        (f"[{run.label}] test AUC (federated, prediction protocol)", run.auc),
    ]
    return rows + _scaling.rows(f"[{run.label}]", run.prediction, run.s_per_tree, "tree")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks hetero",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--key-bits", type=int, default=2048, choices=[1024, 2048, 3072])
    parser.add_argument("--scheme", default="paillier", choices=SCHEMES)
    parser.add_argument(
        "--compare-schemes",
        action="store_true",
        help="run Paillier, then OU, back to back, and check both grow the core's trees",
    )
    parser.add_argument(
        "--compare-kernels",
        action="store_true",
        help=f"run each scheme with each crypto kernel ({', '.join(KERNELS)}; "
        f"${KERNEL_ENV} in the parties), and check every run grows the core's trees",
    )
    parser.add_argument("--trees", type=int, default=5)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=None, help="first N training rows only")
    parser.add_argument(
        "--workers", type=int, default=None, help="crypto processes per party (default: cores)"
    )
    parser.add_argument("--data-dir", default=None)
    _scaling.add_bandwidth_argument(parser)
    _scaling.add_trace_workers_argument(parser)
    args = parser.parse_args(argv)
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    if split.task is not Task.BINARY:
        parser.error(f"{args.dataset} is not a binary task (this benchmark reports AUC)")
    if not 1 <= args.hosts <= split.host_train.shape[1]:
        parser.error("--hosts must be between 1 and the number of host features")
    if args.rows is not None:
        if args.rows < 2:
            parser.error("--rows must be at least 2")
        n = args.rows
        split = replace(
            split,
            guest_train=split.guest_train[:n],
            host_train=split.host_train[:n],
            y_train=split.y_train[:n],
        )
    cores = default_workers()
    workers = args.workers or cores
    if workers < 1:
        parser.error("--workers must be at least 1")
    if args.trace_workers is not None and args.trace_workers < 1:
        parser.error("--trace-workers must be at least 1")
    params = _params(args, split)
    blocks = np.array_split(np.arange(split.host_train.shape[1]), args.hosts)
    n_rows = int(split.y_train.size)
    load_before = os.getloadavg()[0]
    schemes = list(SCHEMES) if args.compare_schemes else [args.scheme]
    kernels: list[str | None] = list(KERNELS) if args.compare_kernels else [None]
    # A scheme's kernels back to back: their ratio is the one compared, and this machine drifts.
    runs = [
        _run_scheme(args, split, blocks, params, scheme, workers, kernel)
        for scheme in schemes
        for kernel in kernels
    ]

    t0 = time.perf_counter()
    xgb = _xgboost_model(args, split)
    xgb.fit(split.X_train, split.y_train)
    xgb_seconds = time.perf_counter() - t0
    xgb_auc = float(auc(split.y_test, _predict_xgb(xgb, split.X_test, split.task)))
    core = train(params, split.X_train, split.y_train).trees
    identical = all(compare_trees(run.trees, core) for run in runs)

    rows: list[tuple[str, Any]] = [
        ("dataset", args.dataset),
        ("train rows / test rows", f"{n_rows} / {split.y_test.size}"),
        (
            "guest / host features",
            f"{split.guest_train.shape[1]} / " + " + ".join(str(b.size) for b in blocks),
        ),
        ("trees / depth / bins / lr", f"{args.trees} / {args.depth} / {args.bins} / {args.lr}"),
        ("key bits / workers per party / cores", f"{args.key_bits} / {workers} / {cores}"),
        ("load average (1 min) before the run", load_before),
    ]
    for run in runs:
        rows += _rows(run)
    by = {(run.kernel, run.scheme): run for run in runs}
    for kernel in kernels:
        if len(schemes) == 2:
            ou, paillier = by[kernel, "ou"], by[kernel, "paillier"]
            rows.append(
                (
                    "ou s/tree / paillier s/tree" + (f" ({kernel})" if kernel else ""),
                    ou.s_per_tree / paillier.s_per_tree,
                )
            )
    if args.compare_kernels:
        for scheme in schemes:
            native, gmpy2 = by["native", scheme], by["gmpy2", scheme]
            rows.append(
                (f"{scheme}: native s/tree / gmpy2 s/tree", native.s_per_tree / gmpy2.s_per_tree)
            )
    rows += [
        ("identical trees (every run = plaintext core)", identical),
        ("test AUC (xgboost hist, joined)", xgb_auc),
        ("xgboost s/tree (1 thread)", xgb_seconds / args.trees),
    ]
    print_table(
        rows,
        f"hetero SecureBoost, {args.dataset}, guest + {args.hosts} host(s) "
        "(separate processes, WebSocket + mTLS)",
    )
    out: dict[str, Any] = {
        "benchmark": "hetero",
        "dataset": args.dataset,
        "rows": n_rows,
        "key_bits": args.key_bits,
    }
    if args.compare_kernels:
        out["kernels"] = {
            str(kernel): {run.scheme: run.json() for run in runs if run.kernel == kernel}
            for kernel in kernels
        }
        out["native_over_gmpy2"] = {
            scheme: round(by["native", scheme].s_per_tree / by["gmpy2", scheme].s_per_tree, 4)
            for scheme in schemes
        }
        out["xgboost_auc"] = round(xgb_auc, 6)
        out["identical_trees"] = identical
    elif args.compare_schemes:
        for run in runs:
            out[run.scheme] = run.json()
        out["ou_over_paillier"] = round(runs[1].s_per_tree / runs[0].s_per_tree, 4)
        out["xgboost_auc"] = round(xgb_auc, 6)
        out["identical_trees"] = identical
    else:  # the line's keys as they were before there were schemes to compare
        (run,) = runs
        out |= run.json()
        out["phases"] = run.phases
        out["auc"] = round(run.auc, 6)
        out["xgboost_auc"] = round(xgb_auc, 6)
    # Per scheme, from the first kernel's run (native, with --compare-kernels).
    out["scaling"] = {scheme: by[kernels[0], scheme].prediction.scaling for scheme in schemes}
    emit_json(out)
    return 0
