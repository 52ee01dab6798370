"""Scale-out: a party's work on a Dask cluster (TLS) against its local process pool.

``python -m benchmarks scaleout --dataset synth150k --trees 2 --depth 4 --key-bits 1024
[--workers 2 --repeats 3 --psi-ids 1000000 --overlap 0.5 --bins 32 --lr 0.3 --seed 0
--data-dir DIR]``

Back to back, in this order:

1. **pool**: the ``hetero`` benchmark's federation (guest and host as separate processes over
   TLS WebSockets on 127.0.0.1), each party with a local pool of ``--workers`` workers (threads
   under the native kernel, as a party's training starts them; else processes);
2. **dask**: the same, each party with its own TLS ``LocalCluster`` of ``--workers``
   single-threaded worker processes (certificates of a cluster CA of its own, not the
   federation's), used through a :class:`~p2pboost.workers.ClusterPool`. The guest's cluster
   runs on the guest's own machine here, as trusted as its local pool, so its workers hold
   the key (``key_workers="all"``: decryption there, encryption in the key's CRT form, as
   the pool does); run 4 keeps the key off it.

   Runs 1 and 2 alternate ``--repeats`` times (a slow spell of a shared machine then falls
   on both) and the figures are their medians;
3. **dask, a worker killed**: as 2, and the host's worker of its first shard is killed with
   SIGKILL when the host starts the first layer of the first tree;
4. **dask, the key kept off the cluster**: as 2, but the guest's decryptions run in a local
   pool and its workers encrypt with the public key only (``keyless_s_per_tree``);
5. **PSI** of ``--psi-ids`` x ``--psi-ids`` ids (``--overlap`` in common): both parties in
   this process over TLS WebSockets, sharing a pool of ``--workers`` processes, then sharing a
   TLS ``LocalCluster`` of as many workers.

Timed as in ``hetero`` (``s_per_tree``: the guest's wall time in ``guest_train`` per tree;
pools and clusters are started and warmed before). ``identical_trees``: every run 1, 2 and 4
grows the plaintext core's trees; ``worker_killed_identical``: run 3 too, and the host's shard
moved to a live worker (``moves``). ``psi_*_s``: wall seconds of the PSI run; both must be correct.

``model``: predicted seconds per tree and PSI seconds on clusters of 8, 32 and 128 workers per
party, for 1 and 10 million rows (ids), from costs measured in this run: the elementary
operations on one core (encryption, addition, compression, decryption, X25519), the cluster's
overhead per task (the mean of 200 empty tasks in flight at once on the TLS cluster) and
the tree's shape measured in run 1. Its assumptions are in the README next to this file.

Last line: ``{"benchmark": "scaleout", "dataset", "pool_s_per_tree", "dask_s_per_tree",
"ratio", "repeats", "pool_runs_s_per_tree", "dask_runs_s_per_tree", "identical_trees",
"tls": true, "worker_killed_identical", "killed_s_per_tree",
"keyless_s_per_tree", "moves", "psi_ids",
"psi_pool_s", "psi_dask_s", "psi_ratio", "psi_correct", "model": {...}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table
from benchmarks._hetero_lossless import CostModel, _candidates, _scored_nodes, compare_trees
from benchmarks.hetero import GUEST, run_federation
from benchmarks.lossless import DATASETS, HeteroSplit, Task, _params, load_hetero_split
from benchmarks.psi import bare_exchange_rate, run_psi
from p2pboost import certs
from p2pboost.crypto.pieces import (
    CLUSTER_FACTOR,
    MIN_CIPHERTEXTS,
    MIN_HASHES,
    MIN_POINTS,
    cut,
    task_bound,
)
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.common import chunk_bounds
from p2pboost.hetero.training.layout import shard_block, shards_reached
from p2pboost.workers import ClusterPool, connect_cluster, local_cluster, process_pool

__all__ = ["main"]

#: Cluster sizes and rows of the scaling model.
MODEL_WORKERS = (8, 32, 128)
MODEL_ROWS = (1_000_000, 10_000_000)
#: Bandwidth inside a party (bytes/s): 10 Gb/s Ethernet between its machines.
PARTY_BANDWIDTH = 1.25e9
#: The guest's stream of gradient chunks (``HeteroConfig.chunk_rows``, ``max_chunk_rows``):
#: encryption tasks (:func:`_encryption_tasks`) and one host task per shard each.
CHUNK_ROWS = HeteroConfig().chunk_rows
MAX_CHUNK_ROWS = HeteroConfig().max_chunk_rows
#: Ids per PSI batch on the wire (``p2pboost.protocols.psi.DEFAULT_BATCH``).
PSI_BATCH = 4096


def _noop() -> None:
    return None


def task_overhead(pool: ClusterPool, tasks: int = 200) -> float:
    """Seconds of cluster overhead per task: ``tasks`` empty tasks sent at once, the wall
    time of all divided by their number (the median of three rounds)."""
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        futures = [pool.submit(_noop) for _ in range(tasks)]
        for future in futures:
            future.result()
        rounds.append((time.perf_counter() - t0) / tasks)
    return statistics.median(rounds)


def _trees(result: Any) -> list[Tree]:
    model = GuestModel.from_dict(result.guest["model"])
    hosts = [HostModel.from_dict(h["model"]) for h in result.hosts]
    return joined_trees(model, hosts)


def _encryption_tasks(chunks: list[tuple[int, int]], rows: int, workers: int) -> int:
    """The guest's encryption tasks for a tree's stream on a cluster: each chunk cut where it
    holds more than 1/(4W) of the tree, none under the cluster's floor
    (:meth:`~p2pboost.crypto.engine.CryptoEngine.piece_cuts`)."""
    floor = MIN_CIPHERTEXTS * CLUSTER_FACTOR
    largest = task_bound(rows, workers)
    return sum(len(cut(b - a, 1, minimum=floor, largest=largest)) - 1 for a, b in chunks)


def _psi_tasks(ids: int, workers: int) -> int:
    """One party's PSI tasks on a cluster for ``ids`` ids each side: its set hashed in pieces,
    then both sets blinded, each wire batch in pieces of at most 1/(4W) of the set
    (:mod:`p2pboost.protocols.psi`)."""
    largest = task_bound(ids, workers)
    hashing = len(cut(ids, workers, minimum=MIN_HASHES * CLUSTER_FACTOR, largest=largest)) - 1
    per_batch = len(cut(PSI_BATCH, 1, minimum=MIN_POINTS * CLUSTER_FACTOR, largest=largest)) - 1
    return hashing + 2 * math.ceil(ids / PSI_BATCH) * per_batch


def _host_chunk_tasks(chunks: list[tuple[int, int]], rows: int, workers: int) -> int:
    """The host's tasks for a tree's stream: one per shard a chunk reaches, the shards of the
    blocks it spans (:func:`~p2pboost.hetero.training.layout.shard_block`)."""
    block = shard_block(rows, workers)
    return sum(shards_reached(a, b, block, workers) for a, b in chunks)


def _model(
    costs: CostModel,
    exchange_rate: float,
    overhead: float,
    ct_bytes: int,
    host_features: int,
    layers: float,
    scored: float,
    candidates: int,
) -> dict[str, Any]:
    """Predicted seconds per tree and PSI seconds for each cluster size and row count.

    Per tree, as the benchmarks' floor (``CostModel.floor``), split by party: the guest
    encrypts ``n`` rows and decrypts the scored nodes' packed candidates, the host adds
    ``n * m * (1 + (layers - 1) / 2)`` ciphertexts and compresses the candidates. Each party's
    operations are spread over its ``W`` workers; the parties' work is added (no overlap, a
    bound from above). Tasks: for each chunk of the guest's stream
    (:func:`~p2pboost.hetero.training.common.chunk_bounds`) its encryption pieces
    (:func:`_encryption_tasks`) and a host task per shard it reaches, one task per shard and
    layer, and the compressions; each costs the measured overhead on the scheduler, which runs
    them one after another. Bytes inside a party: the guest's ciphertexts come back from its
    workers once, the host's go out to its workers once.
    PSI: each party hashes its set and blinds both sets once (``2 n`` X25519 per party for
    ``n`` ids each), in the tasks of :func:`_psi_tasks`, moving 32-byte points both ways.
    """
    out: dict[str, Any] = {
        "assumptions": {
            "party_bandwidth_bytes_per_s": PARTY_BANDWIDTH,
            "scheduler_overhead_s_per_task": round(overhead, 6),
            "parties_overlap": False,
        }
    }
    for rows in MODEL_ROWS:
        infos = scored * candidates
        guest_cpu = rows * costs.encrypt + infos / costs.capacity * costs.decrypt
        host_cpu = rows * host_features * (1 + (layers - 1) / 2) * costs.add
        host_cpu += infos * costs.compress
        chunks = chunk_bounds(rows, CHUNK_ROWS, MAX_CHUNK_ROWS)
        for workers in MODEL_WORKERS:
            stream = _encryption_tasks(chunks, rows, workers)
            stream += _host_chunk_tasks(chunks, rows, workers)
            tasks = stream + workers * layers + scored
            moved = 2 * rows * ct_bytes / PARTY_BANDWIDTH
            tree = (guest_cpu + host_cpu) / workers + tasks * overhead + moved
            psi_tasks = 2 * _psi_tasks(rows, workers)
            psi = 2 * rows / exchange_rate / workers + psi_tasks * overhead
            psi += 4 * rows * 32 / PARTY_BANDWIDTH
            out[f"rows_{rows}_workers_{workers}"] = {
                "s_per_tree": round(tree, 2),
                "psi_s": round(psi, 2),
            }
    return out


def _psi(
    n: int, overlap: float, seed: int, workers: int, federation: Path, cluster_certs: Path
) -> tuple[float, float, bool]:
    """PSI of ``n`` x ``n`` ids on a pool, then on a TLS LocalCluster (identities ``node``
    and ``party`` in ``cluster_certs``): (pool s, dask s, both correct)."""
    rng = np.random.default_rng(seed)
    common = round(n * overlap)
    guest_ids = rng.permutation(n).tolist()
    host_ids = rng.permutation(np.arange(n - common, 2 * n - common)).tolist()
    expected = set(guest_ids) & set(host_ids)

    def correct(g: Any, h: Any) -> bool:
        aligned_g = [guest_ids[i] for i in g.positions.tolist()]
        aligned_h = [host_ids[i] for i in h.positions.tolist()]
        return set(aligned_g) == expected and aligned_g == aligned_h

    with process_pool(workers) as pool:
        list(pool.map(abs, range(workers * 4)))
        g, h, pool_s = asyncio.run(run_psi(guest_ids, host_ids, federation, pool))
    ok = correct(g, h)
    with local_cluster(workers, cluster_certs / "node") as cluster:
        cpool = connect_cluster(cluster.scheduler_address, cluster_certs / "party")
        try:
            cpool.start()
            for future in [cpool.submit(abs, i) for i in range(workers * 4)]:
                future.result()
            g, h, dask_s = asyncio.run(run_psi(guest_ids, host_ids, federation, cpool))
        finally:
            cpool.shutdown()
    return pool_s, dask_s, ok and correct(g, h)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks scaleout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--key-bits", type=int, default=2048, choices=[1024, 2048, 3072])
    parser.add_argument("--trees", type=int, default=2)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="processes per party")
    parser.add_argument("--psi-ids", type=int, default=1_000_000, help="ids per party")
    parser.add_argument("--overlap", type=float, default=0.5)
    parser.add_argument(
        "--repeats", type=int, default=3, help="pool and dask runs, alternated (medians)"
    )
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if min(args.workers, args.psi_ids, args.repeats) < 1 or not 0.0 <= args.overlap <= 1.0:
        parser.error("--workers, --psi-ids and --repeats must be >= 1, --overlap in [0, 1]")
    split: HeteroSplit = load_hetero_split(data_dir(args.data_dir), args.dataset)
    if split.task is not Task.BINARY:
        parser.error(f"{args.dataset} is not a binary task")
    params = _params(args, split)
    blocks = [np.arange(split.host_train.shape[1])]
    n_rows = int(split.y_train.size)
    costs = CostModel.measure(args.key_bits, n_rows)
    rate = bare_exchange_rate()

    with tempfile.TemporaryDirectory(prefix="p2pboost-scaleout-") as tmp:
        base = Path(tmp)
        certs.init(base / "federation", [GUEST, "host1"])
        # Each party's cluster has a CA of its own (one identity for its nodes, one for the
        # party's client); PSI's shared cluster uses the guest's.
        compute: dict[str, dict[str, Any]] = {}
        for party in (GUEST, "host1"):
            certs.init(base / party, ["node", "party"])
            compute[party] = {name: str(base / party / name) for name in ("node", "party")}
        # The guest's cluster runs on its own machine here: as trusted as its local pool, so
        # its workers may hold the key (encryption then uses the key's CRT form, as the pool
        # does). Run 4 keeps the key off the cluster: decryption in a local pool, public-key
        # encryption on the workers.
        keyless = {GUEST: dict(compute[GUEST]), "host1": compute["host1"]}
        compute[GUEST]["key_workers"] = "all"
        certs.init(base / "federation-psi", ["guest", "host"])
        certs.init(base / "psi-cluster", ["node", "party"])

        def federation(compute_by_party: dict[str, dict[str, Any]] | None) -> Any:
            return run_federation(
                base / "federation",
                split,
                blocks,
                params,
                key_bits=args.key_bits,
                workers=args.workers,
                compute=compute_by_party,
            )

        # Alternated, so that a slow spell of a shared machine falls on both.
        pool_runs, dask_runs = [], []
        for _ in range(args.repeats):
            pool_runs.append(federation(None))
            dask_runs.append(federation(compute))
        killed = {GUEST: compute[GUEST], "host1": {**compute["host1"], "kill": True}}
        kill_run = federation(killed)
        keyless_run = federation(keyless)

        with local_cluster(args.workers, base / "psi-cluster" / "node") as cluster:
            probe = connect_cluster(cluster.scheduler_address, base / "psi-cluster" / "party")
            try:
                probe.start()
                overhead = task_overhead(probe)
            finally:
                probe.shutdown()
        psi_pool_s, psi_dask_s, psi_ok = _psi(
            args.psi_ids,
            args.overlap,
            args.seed,
            args.workers,
            base / "federation-psi",
            base / "psi-cluster",
        )

    pool_run = pool_runs[0]
    n_trees = max(1, len(GuestModel.from_dict(pool_run.guest["model"]).trees))
    pool_each = [r.guest["seconds"] / n_trees for r in pool_runs]
    dask_each = [r.guest["seconds"] / n_trees for r in dask_runs]
    pool_s, dask_s = statistics.median(pool_each), statistics.median(dask_each)
    kill_s = kill_run.guest["seconds"] / n_trees
    keyless_s = keyless_run.guest["seconds"] / n_trees
    core = train(params, split.X_train, split.y_train).trees
    kill_trees = _trees(kill_run)
    identical = all(compare_trees(_trees(r), core) for r in (*pool_runs, *dask_runs, keyless_run))
    moves = int(kill_run.hosts[0]["moves"])
    killed_identical = compare_trees(kill_trees, core) and moves >= 1
    scored, layers = _scored_nodes(GuestModel.from_dict(pool_run.guest["model"]), args.depth)
    from p2pboost.crypto.keys import make_keypair

    ct_bytes = make_keypair("paillier", args.key_bits, allow_insecure=True)[0].ciphertext_bytes
    model = _model(
        costs,
        rate,
        overhead,
        ct_bytes,
        split.host_train.shape[1],
        layers,
        scored,
        _candidates(split.host_train, args.bins),
    )
    print_table(
        [
            ("dataset / rows", f"{args.dataset} / {n_rows}"),
            (
                "trees / depth / key bits / workers per party",
                f"{args.trees} / {args.depth} / {args.key_bits} / {args.workers}",
            ),
            (f"pool s/tree (median of {args.repeats})", pool_s),
            (f"dask (TLS LocalCluster) s/tree (median of {args.repeats})", dask_s),
            ("dask / pool (medians)", dask_s / pool_s),
            ("dask, a host worker killed in tree 1: s/tree", kill_s),
            ("dask, the key off the guest's cluster: s/tree", keyless_s),
            ("host shard moves after the kill", moves),
            ("identical trees (every pool and dask run = core)", identical),
            ("identical trees with a worker killed", killed_identical),
            ("cluster overhead per task (ms)", 1e3 * overhead),
            (f"PSI {args.psi_ids} x {args.psi_ids}: pool s", psi_pool_s),
            ("PSI: dask s", psi_dask_s),
            ("PSI: dask / pool", psi_dask_s / psi_pool_s),
            ("PSI correct (both)", psi_ok),
        ],
        "Scale-out: local pool vs a TLS Dask cluster per party",
    )
    for key, value in model.items():
        if key != "assumptions":
            print(f"  model {key}: {value}")
    emit_json(
        {
            "benchmark": "scaleout",
            "dataset": args.dataset,
            "rows": n_rows,
            "key_bits": args.key_bits,
            "workers": args.workers,
            "pool_s_per_tree": round(pool_s, 4),
            "dask_s_per_tree": round(dask_s, 4),
            "ratio": round(dask_s / pool_s, 4),
            "repeats": args.repeats,
            "pool_runs_s_per_tree": [round(x, 4) for x in pool_each],
            "dask_runs_s_per_tree": [round(x, 4) for x in dask_each],
            "identical_trees": identical,
            "tls": True,
            "worker_killed_identical": killed_identical,
            "killed_s_per_tree": round(kill_s, 4),
            "keyless_s_per_tree": round(keyless_s, 4),
            "moves": moves,
            "psi_ids": args.psi_ids,
            "psi_pool_s": round(psi_pool_s, 3),
            "psi_dask_s": round(psi_dask_s, 3),
            "psi_ratio": round(psi_dask_s / psi_pool_s, 4),
            "psi_correct": psi_ok,
            "model": model,
        }
    )
    ok = identical and killed_identical and psi_ok
    return 0 if ok else 1
