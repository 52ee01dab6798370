"""Private inference against the default one-round bits: throughput and single-row latency.

``python -m benchmarks private_inference [--dataset default_credit --trees 25 --depth 5
--hosts 1 --key-bits 2048 --train-key-bits 1024 --train-rows 0 --models DIR --rows 2000
--private-rows 200 --requests 100 --private-requests 30 --workers 2 --data-dir DIR]``

One process, parties over the in-memory transport (no TLS, no loopback: what is measured is
the protocols' own cost, the arithmetic and the codec). Training (skipped with ``--models
DIR``, files as ``python -m benchmarks inference --save-models DIR`` writes them) uses a
``--train-key-bits`` key on the first ``--train-rows`` rows (0: all); the inference cost does
not depend on either, only on the trees (``--trees`` of depth ``--depth``).

Measured, each for the default protocol (decision bits) and for private inference
(``guest_predict(private=True)``, the guest's ``--key-bits`` Okamoto-Uchiyama key made once):

* ``rows_per_s``: one batch of ``--rows`` (default) or ``--private-rows`` (private) rows;
* ``p50_ms``, ``p99_ms``: sequential single-row batch requests in one session
  (``--requests`` / ``--private-requests``), the cost of one online request without
  micro-batching;
* ``online_p50_ms``, ``online_p99_ms``: sequential single-row ``GuestPredictor.predict``
  calls over long-lived sessions (hosts find rows by id; private sessions set the key and
  the padded layout up once), the same request counts;
* ``max_abs_diff``: the largest difference between the private and the default margins.

The JSON line: ``{"benchmark": "private_inference", "dataset", "trees", "depth", "hosts",
"key_bits", "slots_per_row", "default": {"rows_per_s", "p50_ms", "p99_ms"}, "private":
{...}, "max_abs_diff"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from benchmarks._common import data_dir, emit_json, print_table
from benchmarks.inference import load_vertical
from p2pboost.crypto.keys import make_keypair
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.inference.batch import guest_predict, host_predict
from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.hetero.inference.private import PrivateForest
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, LocalFederation, MemoryFabric, local_federation
from p2pboost.workers import process_pool

F64 = npt.NDArray[np.float64]


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks private_inference")
    p.add_argument("--dataset", default="default_credit")
    p.add_argument("--trees", type=int, default=25)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument("--key-bits", type=int, default=2048, help="the guest's inference key")
    p.add_argument("--train-key-bits", type=int, default=1024)
    p.add_argument("--train-rows", type=int, default=0, help="rows to train on (0: all)")
    p.add_argument("--models", default=None, help="load guest.json, host1.json, ... here")
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--private-rows", type=int, default=200)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--private-requests", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-dir", default=None)
    return p.parse_args(argv)


async def _train(
    c: LocalFederation, Xg: F64, y: F64, Xh: Sequence[F64], args: argparse.Namespace, pool: Any
) -> tuple[GuestModel, list[HostModel]]:
    hosts = [f"h{k}" for k in range(1, len(Xh) + 1)]
    params = BoostParams(n_estimators=args.trees, max_depth=args.depth, max_bin=32)
    config = HeteroConfig(key_bits=args.train_key_bits, allow_insecure_key=True)

    async def guest() -> GuestModel:
        async with c["g"].session("train", peers=hosts) as s:
            return await guest_train(s, hosts, Xg, y, params, config=config, executor=pool)

    async def host(h: str, X: F64) -> HostModel:
        async with c[h].session("train", peers=["g"]) as s:
            return await host_train(s, "g", X, executor=pool, workers=args.workers)

    out = await asyncio.gather(guest(), *(host(h, X) for h, X in zip(hosts, Xh, strict=True)))
    return cast(GuestModel, out[0]), [cast(HostModel, m) for m in out[1:]]


async def _run(
    c: LocalFederation,
    guest: GuestModel,
    hosts: Sequence[HostModel],
    Xg: F64,
    Xh: Sequence[F64],
    calls: int,
    **kwargs: Any,
) -> tuple[list[float], F64]:
    """``calls`` sequential requests for the rows ``Xg``/``Xh`` in one session: the wall
    time of each and the last margins."""
    names = list(guest.hosts)
    times: list[float] = []
    margin: list[F64] = []

    async def g() -> None:
        async with c["g"].session("predict", peers=names) as s:
            for _ in range(calls):
                t0 = time.perf_counter()
                margin.append(await guest_predict(s, guest, Xg, **kwargs))
                times.append(time.perf_counter() - t0)

    async def h(name: str, model: HostModel, X: F64) -> None:
        async with c[name].session("predict", peers=["g"]) as s:
            for _ in range(calls):
                await host_predict(s, model, X, executor=kwargs.get("executor"))

    await asyncio.gather(g(), *(h(n, m, X) for n, m, X in zip(names, hosts, Xh, strict=True)))
    return times, margin[-1]


async def _online(
    c: LocalFederation,
    guest: GuestModel,
    hosts: Sequence[HostModel],
    ids: npt.NDArray[np.int64],
    Xg: F64,
    Xh: Sequence[F64],
    requests: int,
    pool: Any,
    **kwargs: Any,
) -> list[float]:
    """Latency of ``requests`` sequential single-row ``GuestPredictor.predict`` calls over
    long-lived sessions (hosts look rows up by id), after one warm-up request."""
    names = list(guest.hosts)
    tasks = [
        asyncio.create_task(
            serve_host(c[n], m, ArrayStore(ids, X), executor=pool, private=kwargs.get("private"))
        )
        for n, m, X in zip(names, hosts, Xh, strict=True)
    ]
    times: list[float] = []
    try:
        async with GuestPredictor(
            c["g"], guest, output="margin", executor=pool, host_timeout=120.0, **kwargs
        ) as p:
            await p.predict(ids[0], Xg[0])
            for i in range(requests):
                row = (i + 1) % ids.size
                t0 = time.perf_counter()
                await p.predict(ids[row], Xg[row])
                times.append(time.perf_counter() - t0)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return times


def _ms(times: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(times) * 1e3, q))


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    data = load_vertical(data_dir(args.data_dir), args.dataset)
    blocks = np.array_split(np.arange(data.host.shape[1]), args.hosts)
    Xh_all = [data.host[:, b] for b in blocks]
    names = ["g", *(f"h{k}" for k in range(1, args.hosts + 1))]
    with process_pool(args.workers) as pool:
        async with local_federation(MemoryFabric(), names, TRAINING) as c:
            if args.models:
                from pathlib import Path

                folder = Path(args.models)
                guest = GuestModel.load(folder / "guest.json")
                hosts = [HostModel.load(folder / f"host{k}.json") for k in range(1, args.hosts + 1)]
                guest = GuestModel.from_dict({**guest.to_dict(), "hosts": names[1:]})
                hosts = [HostModel.from_dict({**m.to_dict(), "guest": "g"}) for m in hosts]
            else:
                n = args.train_rows or data.y.size
                guest, hosts = await _train(
                    c, data.guest[:n], data.y[:n], [X[:n] for X in Xh_all], args, pool
                )
            keys = make_keypair("ou", args.key_bits, allow_insecure=args.key_bits < 2048)
            rows = slice(0, args.rows)
            prow = slice(0, args.private_rows)
            one = slice(0, 1)
            sub = [X[rows] for X in Xh_all]
            t_default, m_default = await _run(c, guest, hosts, data.guest[rows], sub, 2)
            t_private, m_private = await _run(
                c,
                guest,
                hosts,
                data.guest[prow],
                [X[prow] for X in Xh_all],
                1,
                private=True,
                keys=keys,
                executor=pool,
            )
            s_default, _ = await _run(
                c, guest, hosts, data.guest[one], [X[one] for X in Xh_all], args.requests
            )
            s_private, _ = await _run(
                c,
                guest,
                hosts,
                data.guest[one],
                [X[one] for X in Xh_all],
                args.private_requests,
                private=True,
                keys=keys,
                executor=pool,
            )
            ids = data.ids[: args.rows]
            sub_g = data.guest[: args.rows]
            o_default = await _online(c, guest, hosts, ids, sub_g, sub, args.requests, pool)
            o_private = await _online(
                c, guest, hosts, ids, sub_g, sub, args.private_requests, pool,
                private=True, keys=keys,
            )  # fmt: skip
    diff = float(np.max(np.abs(m_private - m_default[prow])))
    forest = PrivateForest(guest)
    return {
        "benchmark": "private_inference",
        "dataset": args.dataset,
        "trees": len(guest.trees),
        "depth": forest.depth,
        "hosts": args.hosts,
        "key_bits": args.key_bits,
        "slots_per_row": forest.positions,
        "default": {
            "rows_per_s": args.rows / min(t_default),
            "p50_ms": _ms(s_default, 50),
            "p99_ms": _ms(s_default, 99),
            "online_p50_ms": _ms(o_default, 50),
            "online_p99_ms": _ms(o_default, 99),
        },
        "private": {
            "rows_per_s": args.private_rows / t_private[0],
            "p50_ms": _ms(s_private, 50),
            "p99_ms": _ms(s_private, 99),
            "online_p50_ms": _ms(o_private, 50),
            "online_p99_ms": _ms(o_private, 99),
        },
        "max_abs_diff": diff,
    }


def main(argv: list[str]) -> int:
    args = _parse(argv)
    result = asyncio.run(_measure(args))
    rows = [
        ("trees x depth", f"{result['trees']} x {result['depth']}"),
        ("ciphertexts per row (private)", result["slots_per_row"]),
        ("key", f"OU {result['key_bits']} bits"),
    ]
    for mode in ("default", "private"):
        r = result[mode]
        rows.append((f"{mode}: rows/s", f"{r['rows_per_s']:.1f}"))
        rows.append((f"{mode}: single row p50 / p99 ms", f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f}"))
        online = f"{r['online_p50_ms']:.1f} / {r['online_p99_ms']:.1f}"
        rows.append((f"{mode}: online predict() p50 / p99 ms", online))
    rows.append(("max |private - default|", f"{result['max_abs_diff']:.2e}"))
    print_table(rows, f"private inference, {result['dataset']}")
    emit_json(result)
    return 0
