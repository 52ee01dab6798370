"""Federated inference: batch throughput, online latency and exactness, parties in processes.

``python -m benchmarks inference [--dataset default_credit --trees 25 --depth 5 --hosts 1
--key-bits 1024 --models DIR --save-models DIR --repeats 5 --clients 100 --requests 50
--max-batch 512 --max-wait-ms 0 --profile DIR --data-dir DIR --endpoint --group 256]``

The guest holds ``NAME_hetero_guest.csv`` (``id``, ``y`` and its features); the columns of
``NAME_hetero_host.csv`` go to one host, or are split into ``--hosts`` contiguous blocks
(host 1 first), as in the ``hetero`` benchmark. Every party is its own spawned process with
its own node, over TLS 1.3 WebSockets on 127.0.0.1 with certificates of a throw-away
federation CA (the hosts listen, the guest dials).

Two stages, each in fresh processes:

1. **Training** (skipped with ``--models DIR``): hetero SecureBoost on every row, joined on
   ``id``. The key defaults to 1024 bits (the explicit insecure opt-in): inference never
   touches the key, so its size changes nothing measured here; it only makes training
   quicker. Each party writes its own model file (``guest.json``, ``host1.json``, ...; kept
   with ``--save-models DIR``).
2. **Serving**: new processes *load those files*. Each host serves
   :func:`~p2pboost.hetero.inference.predictor.serve_host` with an
   :class:`~p2pboost.hetero.inference.feature_store.ArrayStore` read from its CSV (rows found by
   id); the guest runs a :class:`~p2pboost.hetero.inference.predictor.GuestPredictor`
   (``output="margin"``) and measures:

   * ``rows_per_s``: every row of the data set as ONE ``predict_batch`` (ids + the guest's
     features), median over ``--repeats`` timed batches after two warm-up batches;
   * ``rounds_per_batch``: messages the guest sent to each host during those batches,
     divided by the batches (``GuestPredictor.stats()``); the highest over the hosts;
   * ``p50_ms``, ``p99_ms``: latency of single-row ``predict(id, x)`` requests from
     ``--clients`` concurrent clients (asyncio tasks in the guest's process, each sending its
     next request when the previous one is answered; rows drawn at random), ``--requests``
     timed requests per client after ``--warmup`` untimed ones each;
   * ``max_abs_diff``: largest ``|federated margin - core margin|`` over every row, where the
     core (:func:`p2pboost.gbdt.booster.train`) is trained on the joined rows with the
     model file's own ``BoostParams`` in this run (raw scores, before the sigmoid).

The table also shows where a batch's time goes: the guest's unpacking and tree walk and a
host's lookup, decision bits and packing, each timed alone in its process on all rows
(no network); the rest is the codec, TLS, the loopback and scheduling. It also shows the
micro-batches of the latency phase (their sizes, as the host's store saw them), the wall
time per micro-batch next to the CPU time each process spent per micro-batch (the guest's
includes the benchmark's own client tasks; the difference is waiting: the loopback, TLS, the
kernel, ``max_wait`` and other processes on the same cores), the requests per second, the
latency of sequential single requests (no concurrency) and whether every online score
equals the batch score of its row.

``--endpoint`` sends the online load through the guest's serving endpoint instead (JSON over
WebSocket + mTLS from a client process) and checks that ``/metrics``, scraped over the probe
port before and after it, counted every request (:mod:`benchmarks._inference_endpoint`).

``--profile DIR`` writes ``guest.prof`` and ``hostK.prof`` (:mod:`cProfile` of each serving
process's event-loop thread; read with :mod:`pstats`), and with ``--endpoint`` ``app.prof``
(the client process's); profiled runs are slower, so their figures are for finding hot
spots, not for the record.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks import _inference_endpoint as endpoint
from benchmarks._common import data_dir, emit_json, median_time, print_table, read_csv
from benchmarks._inference_args import parse
from benchmarks._inference_models import host_node, train_models
from benchmarks.hetero import GUEST, PARTY_TIMEOUT
from p2pboost import certs
from p2pboost.app._local import LocalParties, Report
from p2pboost.certs import TLSConfig
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.inference.feature_store import ArrayStore, FeatureStore
from p2pboost.hetero.inference.forest import (
    FlatForest,
    HostSplits,
    host_bits,
    pack_bits,
    unpack_bits,
)
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.net.node import Node
from p2pboost.workers import default_workers

__all__ = ["Load", "Vertical", "load_vertical", "main"]

F64 = npt.NDArray[np.float64]
#: The guest waits this long for a host's answer (generous: a shared machine, big batches).
HOST_TIMEOUT = 120.0


@dataclass(frozen=True)
class Vertical:
    """Every row of a vertical data set, host rows put in the guest's order by ``id``."""

    ids: npt.NDArray[np.int64]
    guest: F64
    y: F64
    host: F64
    guest_columns: list[str]
    host_columns: list[str]

    @property
    def X(self) -> F64:
        """The joined view (guest columns, then host columns): what the core trains on."""
        return np.hstack([self.guest, self.host])


def load_vertical(directory: Path, dataset: str) -> Vertical:
    """Read ``NAME_hetero_guest.csv`` and ``NAME_hetero_host.csv`` and join them on ``id``."""
    g_cols, guest = read_csv(directory / f"{dataset}_hetero_guest.csv")
    h_cols, host = read_csv(directory / f"{dataset}_hetero_host.csv")
    g_feat = [i for i, c in enumerate(g_cols) if c not in {"id", "y"}]
    h_feat = [i for i, c in enumerate(h_cols) if c != "id"]
    ids = guest[:, g_cols.index("id")].astype(np.int64)
    host_ids = host[:, h_cols.index("id")].astype(np.int64)
    order = np.argsort(host_ids)
    pos = np.minimum(np.searchsorted(host_ids[order], ids), host_ids.size - 1)
    rows = order[pos]
    if not np.array_equal(host_ids[rows], ids):
        raise SystemExit(f"{dataset}: some guest ids have no host row")
    return Vertical(
        ids=ids,
        guest=guest[:, g_feat],
        y=guest[:, g_cols.index("y")],
        host=host[rows][:, h_feat],
        guest_columns=[g_cols[i] for i in g_feat],
        host_columns=[h_cols[i] for i in h_feat],
    )


@dataclass(frozen=True)
class Load:
    """What the guest does in the serving stage (see the module docstring)."""

    repeats: int = 5
    clients: int = 100
    requests: int = 50
    warmup: int = 5
    sequential: int = 200
    max_batch: int = 512
    max_wait: float = 0.0
    seed: int = 0


# -- stage 2: serving (fresh processes that load the model files) ------------------------------


class CountingStore(FeatureStore):
    """A host's store that records the size of every lookup (one per batch it answers)."""

    def __init__(self, inner: ArrayStore) -> None:
        self.inner = inner
        self.sizes: list[int] = []
        self.cpu: list[float] = []  # the process's CPU seconds at each lookup

    @property
    def n_features(self) -> int:
        return self.inner.n_features

    async def lookup(self, ids: npt.NDArray[Any]) -> tuple[F64, npt.NDArray[np.bool_]]:
        self.sizes.append(int(ids.size))
        self.cpu.append(time.process_time())
        return await self.inner.lookup(ids)

    def ids(self) -> npt.NDArray[Any]:
        return self.inner.ids()


def _host_work_seconds(model: HostModel, store: ArrayStore, repeats: int) -> float:
    """A host's compute for one batch of every row, alone: lookup, decision bits, packing."""
    ids = store.ids()
    splits = HostSplits.of(model)

    def work() -> None:
        X, _ = store.lookup_now(ids)
        pack_bits(host_bits(splits, X))

    return median_time(work, repeats)


def _guest_work_seconds(forest: FlatForest, X: F64, repeats: int, seed: int) -> float:
    """The guest's compute for one batch of every row, alone: unpack the bits, walk the trees."""
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    packed = [pack_bits(rng.random((nodes.size, n)) < 0.5) for nodes in forest.host_nodes]

    def work() -> None:
        bits = [
            unpack_bits(p, nodes.size, n)
            for p, nodes in zip(packed, forest.host_nodes, strict=True)
        ]
        forest.margin(X, bits)

    return median_time(work, repeats)


async def _serve_host(
    report: Report,
    fed: str,
    name: str,
    model_path: str,
    csv: str,
    columns: list[str],
    repeats: int,
) -> dict[str, Any]:
    model = HostModel.load(model_path)
    store = CountingStore(ArrayStore.from_csv(csv, "id", features=columns))
    work_s = _host_work_seconds(model, store.inner, repeats)
    async with host_node(fed, name) as node:
        report("address", node.address)
        await serve_host(node, model, store, sessions=1)
    return {"work_s": work_s, "batch_sizes": store.sizes, "batch_cpu": store.cpu}


async def _serve_guest(
    report: Report,
    fed: str,
    addresses: dict[str, str],
    model_path: str,
    csv: str,
    load: Load,
) -> dict[str, Any]:
    model = GuestModel.load(model_path)
    store = ArrayStore.from_csv(csv, "id", exclude=["y"])
    ids = store.ids()
    X, _ = store.lookup_now(ids)
    work_s = _guest_work_seconds(FlatForest(model), X, load.repeats, load.seed)
    tls = TLSConfig.from_dir(Path(fed) / GUEST)
    async with (
        Node(GUEST, peers=addresses, tls=tls) as node,
        GuestPredictor(
            node,
            model,
            output="margin",
            max_batch=load.max_batch,
            max_wait=load.max_wait,
            host_timeout=HOST_TIMEOUT,
        ) as predictor,
    ):
        result = await _batch_phase(predictor, ids, X, load.repeats)
        result["sequential_s"] = await _sequential_phase(predictor, ids, X, load)
        result.update(await _latency_phase(predictor, ids, X, result["margin"], load))
        result["batches_total"] = predictor.stats().batches
    result.update(
        ids=ids, work_s=work_s, trees=predictor.forest.n_trees, n_nodes=predictor.forest.n_nodes
    )
    return result


async def _batch_phase(
    predictor: GuestPredictor, ids: npt.NDArray[Any], X: F64, repeats: int
) -> dict[str, Any]:
    """Every row as one batch: two warm-ups (the first one's scores are kept), then timed."""
    await predictor.predict_batch(ids[:64], X[:64])
    margin = await predictor.predict_batch(ids, X)
    before = predictor.stats()
    times: list[float] = []
    stable = True
    for _ in range(repeats):
        t0 = time.perf_counter()
        again = await predictor.predict_batch(ids, X)
        times.append(time.perf_counter() - t0)
        stable = stable and bool(np.array_equal(again, margin))
    after = predictor.stats()
    batches = after.batches - before.batches
    rounds = {
        host: (sent - before.messages_to_hosts[host]) / batches
        for host, sent in after.messages_to_hosts.items()
    }
    return {"margin": margin, "batch_s": times, "rounds": rounds, "stable": stable}


async def _sequential_phase(
    predictor: GuestPredictor, ids: npt.NDArray[Any], X: F64, load: Load
) -> list[float]:
    """One client, one request at a time: the latency floor (round trip + ``max_wait``)."""
    rng = np.random.default_rng(load.seed + 1)
    times: list[float] = []
    for r in rng.integers(0, ids.size, load.sequential).tolist():
        t0 = time.perf_counter()
        await predictor.predict(ids[r].item(), X[r])
        times.append(time.perf_counter() - t0)
    return times


async def _latency_phase(
    predictor: GuestPredictor, ids: npt.NDArray[Any], X: F64, margin: F64, load: Load
) -> dict[str, Any]:
    """``clients`` concurrent clients, each sending its next request when answered."""
    rng = np.random.default_rng(load.seed)
    picks = rng.integers(0, ids.size, (load.clients, load.warmup + load.requests))
    answers: list[tuple[int, Any]] = []

    async def client(rows: list[int]) -> list[float]:
        times: list[float] = []
        for r in rows:
            t0 = time.perf_counter()
            score = await predictor.predict(ids[r].item(), X[r])
            times.append(time.perf_counter() - t0)
            answers.append((r, score))
        return times

    await asyncio.gather(*(client(p[: load.warmup].tolist()) for p in picks))
    before = predictor.stats()
    t0, cpu0 = time.perf_counter(), time.process_time()
    per_client = await asyncio.gather(*(client(p[load.warmup :].tolist()) for p in picks))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = predictor.stats()
    exact = all(np.array_equal(score, margin[r]) for r, score in answers)
    return {
        "latency_s": [t for times in per_client for t in times],
        "latency_wall_s": wall,
        "latency_cpu_s": cpu,
        "latency_batches": (before.batches, after.batches),
        "latency_failed": after.failed - before.failed,
        "online_exact": exact,
    }


def start_hosts(
    parties: LocalParties,
    fed: Path,
    models: Path,
    directory: Path,
    dataset: str,
    blocks: Sequence[list[str]],
    repeats: int,
    prof: Callable[[str], str | None],
) -> dict[str, str]:
    """Start every host's serving process (``hostK``, its model file and its block of the
    host CSV's columns) and return the address each listens on; both modes serve so."""
    names = [f"host{k}" for k in range(1, len(blocks) + 1)]
    for name, columns in zip(names, blocks, strict=True):
        parties.start(
            name,
            _serve_host,
            profile=prof(name),
            fed=str(fed),
            name=name,
            model_path=str(models / f"{name}.json"),
            csv=str(directory / f"{dataset}_hetero_host.csv"),
            columns=columns,
            repeats=repeats,
        )
    return {name: parties.expect(name, "address") for name in names}


def serve_and_measure(
    fed: Path,
    models: Path,
    directory: Path,
    dataset: str,
    blocks: Sequence[list[str]],
    load: Load,
    profile: Path | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the serving stage; return the guest's measurements and each host's."""
    names = [f"host{k}" for k in range(1, len(blocks) + 1)]

    def prof(name: str) -> str | None:
        return str(profile / f"{name}.prof") if profile is not None else None

    with LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties:
        addresses = start_hosts(
            parties, fed, models, directory, dataset, blocks, load.repeats, prof
        )
        parties.start(
            GUEST,
            _serve_guest,
            profile=prof(GUEST),
            fed=str(fed),
            addresses=addresses,
            model_path=str(models / "guest.json"),
            csv=str(directory / f"{dataset}_hetero_guest.csv"),
            load=load,
        )
        results = parties.wait()
    return results[GUEST], [results[name] for name in names]


# -- the parent -----------------------------------------------------------------------------


def _ms(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1e3)


def _cpu_per_batch_ms(cpu: Sequence[float], first: int, last: int) -> float:
    """A host's CPU per batch between its lookups of batches ``first`` and ``last - 1``."""
    if last - first < 2:
        return float("nan")
    return 1e3 * (cpu[last - 1] - cpu[first]) / (last - 1 - first)


def _parse(argv: list[str]) -> argparse.Namespace:
    return parse(argv, __doc__)


def _params(args: argparse.Namespace) -> BoostParams:
    return BoostParams(
        objective="binary:logistic",
        n_estimators=args.trees,
        max_depth=args.depth,
        max_bin=args.bins,
        learning_rate=args.lr,
        reg_lambda=1.0,
        seed=args.seed,
    ).validate()


def _core_margin(params: BoostParams, data: Vertical, ids: npt.NDArray[Any]) -> F64:
    """The plaintext core trained on the joined rows: its margins for ``ids``."""
    booster = train(params, data.X, data.y)
    margin = booster.predict_margin(data.X)
    order = np.argsort(data.ids)
    rows = order[np.searchsorted(data.ids[order], ids)]
    if not np.array_equal(data.ids[rows], ids):
        raise SystemExit("the guest scored ids that are not in the data set")
    return np.asarray(margin[rows], dtype=np.float64)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    directory = data_dir(args.data_dir)
    data = load_vertical(directory, args.dataset)
    if np.unique(data.y).size != 2:
        raise SystemExit(f"{args.dataset} is not a binary task (this benchmark trains binary)")
    load = Load(
        repeats=args.repeats,
        clients=args.clients,
        requests=args.requests,
        warmup=args.warmup,
        sequential=args.sequential,
        max_batch=args.max_batch,
        max_wait=args.max_wait_ms / 1e3,
        seed=args.seed,
    )
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="p2pboost-inference-") as tmp:
        fed = Path(tmp) / "fed"
        train_s: float | None = None
        if args.models:
            models = Path(args.models)
            if not (models / "guest.json").is_file():
                raise SystemExit(f"{models / 'guest.json'} not found (train with --save-models)")
            n_hosts = len(GuestModel.load(models / "guest.json").hosts)
        else:
            models = Path(args.save_models or Path(tmp) / "models")
            models.mkdir(parents=True, exist_ok=True)
            n_hosts = args.hosts or 1
        if args.hosts is not None and args.hosts != n_hosts:
            raise SystemExit(f"--hosts {args.hosts}, but the model files have {n_hosts} hosts")
        if not 1 <= n_hosts <= data.host.shape[1]:
            raise SystemExit("--hosts must be between 1 and the number of host features")
        blocks = np.array_split(np.arange(data.host.shape[1]), n_hosts)
        names = [f"host{k}" for k in range(1, n_hosts + 1)]
        certs.init(fed, [GUEST, *names, *([endpoint.APP] if args.endpoint else [])])
        if not args.models:
            workers = args.workers or default_workers()
            train_s = train_models(
                fed,
                data,
                blocks,
                _params(args),
                key_bits=args.key_bits,
                workers=workers,
                out=models,
            )
        guest_model = GuestModel.load(models / "guest.json")
        if list(guest_model.hosts) != names:
            raise SystemExit(f"the guest model's hosts are {guest_model.hosts}, expected {names}")
        profile = Path(args.profile) if args.profile else None
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
        columns = [[data.host_columns[i] for i in block] for block in blocks]
        if args.endpoint:
            margins = partial(_core_margin, guest_model.params, data)
            return endpoint.run(args, fed, models, directory, columns, load, margins, profile)
        guest, hosts = serve_and_measure(
            fed, models, directory, args.dataset, columns, load, profile
        )

    params = guest_model.params
    core = _core_margin(params, data, guest["ids"])
    max_abs_diff = float(np.max(np.abs(guest["margin"] - core)))
    n = int(guest["ids"].size)
    batch_s = float(np.median(guest["batch_s"]))
    rows_per_s = n / batch_s
    rounds = guest["rounds"]
    rounds_per_batch = float(max(rounds.values()))
    latency = guest["latency_s"]
    p50, p99 = _ms(latency, 50), _ms(latency, 99)
    requests_per_s = len(latency) / guest["latency_wall_s"]
    first, last = guest["latency_batches"]
    sizes = np.asarray(hosts[0]["batch_sizes"])
    if sizes.size != guest["batches_total"]:
        raise SystemExit(f"host1 saw {sizes.size} batches, the guest sent {guest['batches_total']}")
    phase_sizes = sizes[first:last]
    cycle_ms = 1e3 * guest["latency_wall_s"] / (last - first)
    guest_cpu_ms = 1e3 * guest["latency_cpu_s"] / (last - first)
    host_cpu_ms = max(_cpu_per_batch_ms(h["batch_cpu"], first, last) for h in hosts)
    host_work = max(h["work_s"] for h in hosts)

    source = f"trained here ({train_s:.1f} s)" if train_s is not None else f"loaded from {models}"
    rows: list[tuple[str, Any]] = [
        ("dataset / rows", f"{args.dataset} / {n}"),
        (
            "guest / host features",
            f"{data.guest.shape[1]} / " + " + ".join(str(b.size) for b in blocks),
        ),
        (
            "trees / depth / bins / lr",
            f"{guest['trees']} / {params.max_depth} / {params.max_bin} / {params.learning_rate}",
        ),
        ("nodes in the forest", guest["n_nodes"]),
        ("model files", source),
        ("training key bits (inference never uses the key)", args.key_bits),
        ("load average (1 min) before the run", load_before),
        ("-- batch: every row in one predict_batch", ""),
        (f"rows_per_s (median of {args.repeats})", rows_per_s),
        ("batch s: median / min", f"{batch_s:.4f} / {min(guest['batch_s']):.4f}"),
        ("  guest unpack + walk s (alone, no network)", guest["work_s"]),
        ("  host lookup + bits + pack s (alone, slowest host)", host_work),
        ("  rest: codec, TLS, loopback, scheduling s", batch_s - guest["work_s"] - host_work),
        (
            "messages per batch per host",
            ", ".join(f"{h} {v:g}" for h, v in rounds.items()),
        ),
        ("repeated batches return identical scores", guest["stable"]),
        (f"-- online: {args.clients} clients x {args.requests} requests", ""),
        ("max_batch / max_wait ms", f"{args.max_batch} / {args.max_wait_ms:g}"),
        (
            "latency ms p50 / p90 / p99 / max",
            " / ".join(f"{_ms(latency, q):.2f}" for q in (50, 90, 99, 100)),
        ),
        ("requests per s", requests_per_s),
        ("batches / failed requests", f"{last - first} / {guest['latency_failed']}"),
        (
            "batch size mean / p50 / p90 / max",
            f"{phase_sizes.mean():.1f} / {np.percentile(phase_sizes, 50):g} / "
            f"{np.percentile(phase_sizes, 90):g} / {phase_sizes.max()}",
        ),
        ("wall ms per batch (request -> answer -> next request)", cycle_ms),
        ("  guest process CPU ms per batch (clients included)", guest_cpu_ms),
        ("  host process CPU ms per batch (slowest host)", host_cpu_ms),
        (
            f"sequential single requests ms p50 / p99 ({args.sequential})",
            f"{_ms(guest['sequential_s'], 50):.2f} / {_ms(guest['sequential_s'], 99):.2f}",
        ),
        ("every online score equals its row's batch score", guest["online_exact"]),
        ("-- exactness", ""),
        ("max |federated - core margin| (every row)", max_abs_diff),
    ]
    if profile is not None:
        rows.append(("cProfile files (profiled: slower)", str(profile)))
    print_table(
        rows,
        f"federated inference, {args.dataset}, guest + {n_hosts} host(s) "
        "(separate processes, WebSocket + mTLS)",
    )
    emit_json(
        {
            "benchmark": "inference",
            "dataset": args.dataset,
            "trees": guest["trees"],
            "depth": params.max_depth,
            "hosts": n_hosts,
            "clients": args.clients,
            "rows_per_s": round(rows_per_s, 1),
            "rounds_per_batch": rounds_per_batch,
            "p50_ms": round(p50, 3),
            "p99_ms": round(p99, 3),
            "requests_per_s": round(requests_per_s, 1),
            "max_abs_diff": max_abs_diff,
        }
    )
    return 0
