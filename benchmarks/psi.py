"""PSI benchmark: guest and host nodes over loopback WebSocket + mutual TLS, against the floor.

``python -m benchmarks psi --n 150000 --overlap 0.5 [--bandwidth-gbps 10 --trace-workers N]``

Both parties run in this process, each in its own node, talking over real TLS 1.3 WebSockets on
127.0.0.1, and share one process pool with a worker per core (as two parties on one machine
share its cores). The floor is the scalar multiplications the protocol performs (every id is
blinded by both parties: ``2 * (n_guest + n_host)``) divided by the rate of a bare
``X25519PrivateKey.exchange`` loop measured in the same run, divided by the cores.

``scaling``: every pool task of the PSI is recorded with its party (each party's coroutine
labels the tasks it submits) and the trace is replayed with each party on a machine of its
own with 8 to 64 workers (:mod:`benchmarks._schedule`); the seconds are those of the whole
PSI, so its entries say ``seconds`` where the tree benchmarks say ``s_per_tree`` (and
``path``, those seconds taken apart along the critical path). The
protocol cuts its work for the pool's workers (one per core here), and the replay keeps
those cuts; ``--trace-workers N`` has both parties cut it for ``N`` workers
(``psi_guest``/``psi_host``'s ``workers``) while the pool stays one per core, so the trace
holds the tasks an ``N``-worker party would run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from concurrent.futures import Executor
from pathlib import Path

import numpy as np

from benchmarks import _scaling
from benchmarks._common import emit_json, print_table
from p2pboost import certs
from p2pboost.certs import TLSConfig
from p2pboost.crypto.psi import PsiKey, hash_ids
from p2pboost.net.node import Node
from p2pboost.protocols.psi import PsiResult, psi_guest, psi_host
from p2pboost.workers import process_pool, record_trace, trace_party


def bare_exchange_rate(samples: int = 20000, repeat: int = 3) -> float:
    """Scalar multiplications per second of a bare X25519 exchange loop on one core."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )

    key = X25519PrivateKey.generate()
    blob = hash_ids(range(samples))
    points = [blob[i : i + 32] for i in range(0, len(blob), 32)]
    exchange, from_bytes = key.exchange, X25519PublicKey.from_public_bytes
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for u in points:
            exchange(from_bytes(u))
        times.append(time.perf_counter() - t0)
    return samples / statistics.median(times)


async def run_psi(
    guest_ids: list[int],
    host_ids: list[int],
    federation: Path,
    pool: Executor,
    workers: int | None = None,
) -> tuple[PsiResult, PsiResult, float]:
    async with Node(
        "host",
        listen="wss://127.0.0.1:0",
        peers={"guest": None},
        tls=TLSConfig.from_dir(federation / "host"),
    ) as host_node:
        async with Node(
            "guest",
            peers={"host": host_node.address},
            tls=TLSConfig.from_dir(federation / "guest"),
        ) as guest_node:

            async def host() -> PsiResult:
                with trace_party("host"):  # the tasks this coroutine submits are the host's
                    async with host_node.session("psi", peers=["guest"]) as s:
                        return await psi_host(s, "guest", host_ids, executor=pool, workers=workers)

            async def guest() -> PsiResult:
                with trace_party("guest"):
                    async with guest_node.session("psi", peers=["host"]) as s:
                        return await psi_guest(
                            s, ["host"], guest_ids, executor=pool, workers=workers
                        )

            t0 = time.perf_counter()
            g, h = await asyncio.gather(guest(), host())
            return g, h, time.perf_counter() - t0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks psi", description=__doc__)
    parser.add_argument("--n", type=int, default=150_000, help="ids per party")
    parser.add_argument("--overlap", type=float, default=0.5, help="fraction of ids in common")
    parser.add_argument("--seed", type=int, default=0)
    _scaling.add_bandwidth_argument(parser)
    _scaling.add_trace_workers_argument(parser)
    args = parser.parse_args(argv)
    if args.n < 1 or not 0.0 <= args.overlap <= 1.0:
        parser.error("--n must be >= 1 and --overlap in [0, 1]")
    if args.trace_workers is not None and args.trace_workers < 1:
        parser.error("--trace-workers must be at least 1")

    rng = np.random.default_rng(args.seed)
    common = round(args.n * args.overlap)
    guest_ids = rng.permutation(args.n).tolist()
    host_ids = rng.permutation(np.arange(args.n - common, 2 * args.n - common)).tolist()
    cores = os.cpu_count() or 1

    rate = bare_exchange_rate()
    with tempfile.TemporaryDirectory() as tmp, process_pool(cores) as pool:
        certs.init(Path(tmp), ["guest", "host"])
        PsiKey.generate().blind(hash_ids(range(cores * 8)))  # warm-up outside the timing
        list(pool.map(abs, range(cores * 4)))  # start the workers outside the timing
        trace = Path(tmp) / "trace"
        with record_trace(trace):
            start = time.time()
            g, h, seconds = asyncio.run(
                run_psi(guest_ids, host_ids, Path(tmp), pool, args.trace_workers)
            )
            stop = time.time()
        prediction = _scaling.predict(
            trace,
            start=start,
            stop=stop,
            units=1,
            workers=args.trace_workers or cores,
            bandwidth=_scaling.bandwidth(args.bandwidth_gbps),
            key="seconds",
        )

    expected = set(guest_ids) & set(host_ids)
    aligned_g = [guest_ids[i] for i in g.positions.tolist()]
    aligned_h = [host_ids[i] for i in h.positions.tolist()]
    correct = set(aligned_g) == expected and aligned_g == aligned_h
    mults = 2 * (len(guest_ids) + len(host_ids))
    floor = mults / rate / cores
    result = {
        "benchmark": "psi",
        "n": args.n,
        "intersection": g.size,
        "correct": correct,
        "seconds": round(seconds, 4),
        "floor_seconds": round(floor, 4),
        "items_per_s": round((len(guest_ids) + len(host_ids)) / seconds, 1),
        "scaling": prediction.scaling,
    }
    print_table(
        [
            ("ids per party", args.n),
            ("intersection (expected)", f"{g.size} ({len(expected)})"),
            ("aligned identically", aligned_g == aligned_h),
            ("scalar multiplications", mults),
            ("bare exchange per s (1 core)", round(rate, 1)),
            ("cores", cores),
            ("seconds", seconds),
            ("floor seconds", floor),
            ("seconds / floor", seconds / floor),
            *_scaling.rows("", prediction, seconds, "PSI"),
        ],
        "PSI: guest + host over loopback WebSocket + mTLS",
    )
    emit_json(result)
    return 0 if correct else 1
