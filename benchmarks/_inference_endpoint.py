"""``python -m benchmarks inference --endpoint``: the same load through the serving endpoint.

The default mode measures the :class:`~p2pboost.hetero.inference.predictor.GuestPredictor`
called from the guest's own process. A deployment puts the serving endpoint
(:mod:`p2pboost.hetero.inference.endpoint`) in front of it, and its clients are other
programs: JSON over a WebSocket with mutual TLS, one certificate per application. This mode
measures that path, and checks on the way that an operator's Prometheus would see the load:

* the guest (its own process) loads its model file and serves the endpoint on a free
  loopback port with its party certificate, plus the plain-HTTP probe port a party opens
  with ``[serve] probe`` (``/healthz``, ``/readyz``, ``/metrics``: the endpoint's
  ``p2pboost_serve_*`` families and the node's ``p2pboost_node_*``), as ``p2pboost serve``
  does; the hosts serve from their CSVs as in the default mode;
* a client process (certificate ``app`` of the run's CA) warms up, then reads ``/metrics``
  and ``/healthz`` from the probe port with a plain HTTP GET (what ``curl -s
  http://127.0.0.1:PORT/metrics`` does), sends the timed load with
  :func:`~p2pboost.hetero.inference.endpoint.stream_scores`, and reads them again;
* both scrapes are parsed by ``prometheus_client.parser.text_string_to_metric_families``
  and the differences reported: requests, messages, latency and micro-batch histogram
  counts, errors by kind, bytes, connections, and the node's messages to each host.
  ``counters_moved`` is true when the request counter moved by exactly the requests sent
  between the scrapes, the latency histogram by the messages sent, no error was counted,
  and the batch histogram agrees with the predictor's own counts on ``/healthz``.

The load: ``rows_per_s`` is every row sent as one pipelined stream (``--group`` requests per
message), median over ``--repeats`` passes after one warm-up pass; ``p50_ms``/``p99_ms`` and
``requests_per_s`` come from ``--clients`` connections, each sending one request (id and
features) at a time, ``--requests`` timed ones after ``--warmup`` untimed ones on
connections of their own. The guest's predictor answers margins, so the first pass's scores
give ``max_abs_diff`` against the core as in the default mode.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks._common import emit_json, print_table
from benchmarks.hetero import GUEST, PARTY_TIMEOUT

__all__ = ["APP", "counters_moved", "metric_deltas", "parse_samples", "run", "scrape"]

#: The client application's party id (its certificate comes from the run's CA).
APP = "app"
#: Samples of the scrape that the JSON reports, by the key it reports them under.
_SERVE = "p2pboost_serve_"
_TOTALS = {
    "requests": _SERVE + "requests_total",
    "messages": _SERVE + "message_requests_count",
    "request_seconds_count": _SERVE + "request_seconds_count",
    "request_seconds_sum": _SERVE + "request_seconds_sum",
    "batches": _SERVE + "batch_rows_count",
    "batch_rows": _SERVE + "batch_rows_sum",
    "batch_seconds_count": _SERVE + "batch_seconds_count",
    "batch_seconds_sum": _SERVE + "batch_seconds_sum",
    "received_bytes": _SERVE + "received_bytes_total",
    "sent_bytes": _SERVE + "sent_bytes_total",
    "connections_opened": _SERVE + "connections_opened_total",
}
#: Labelled families reported per label value (kind of error, reason, peer).
_BY_LABEL = {
    "errors": (_SERVE + "errors_total", "kind"),
    "refused": (_SERVE + "refused_total", "reason"),
    "node_sent_messages": ("p2pboost_node_sent_messages_total", "peer"),
    "node_sent_bytes": ("p2pboost_node_sent_bytes_total", "peer"),
    "node_received_bytes": ("p2pboost_node_received_bytes_total", "peer"),
}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# -- the scrape ---------------------------------------------------------------------------------


def scrape(probe: str, path: str = "/metrics") -> str:
    """A plain HTTP GET of ``probe`` + ``path`` (what ``curl -s`` does); the body."""
    with urllib.request.urlopen(probe + path, timeout=10.0) as response:
        body: bytes = response.read()
    return body.decode()


def parse_samples(text: str) -> Samples:
    """Every sample of a Prometheus text, by name and labels (``prometheus_client``'s parser:
    text it cannot parse raises here, which is part of what this mode checks)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric_deltas(before: Samples, after: Samples) -> dict[str, Any]:
    """What moved between two scrapes: the totals of :data:`_TOTALS` and, for the labelled
    families, a mapping per label value (values absent before count from 0)."""

    def delta(key: tuple[str, tuple[tuple[str, str], ...]]) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    out: dict[str, Any] = {name: delta((sample, ())) for name, sample in _TOTALS.items()}
    for name, (sample, label) in _BY_LABEL.items():
        keys = sorted({k for k in (*before, *after) if k[0] == sample})
        out[name] = {dict(k[1]).get(label, ""): delta(k) for k in keys}
    out["errors_total"] = float(sum(out["errors"].values()))
    return {k: _number(v) if isinstance(v, float) else v for k, v in out.items()} | {
        k: {label: _number(v) for label, v in out[k].items()} for k in _BY_LABEL
    }


def _number(value: float) -> int | float:
    """Counts as integers in the JSON (counters of requests, bytes); sums of seconds rounded."""
    return int(value) if value.is_integer() else round(value, 6)


def counters_moved(
    deltas: Mapping[str, Any],
    sent: int,
    messages: int,
    health: tuple[Mapping[str, Any], Mapping[str, Any]],
) -> bool:
    """Whether the scrapes saw the load: ``sent`` requests in ``messages`` messages, none
    failed, and micro-batches as many as the predictor counted (``/healthz`` before/after)."""
    before, after = health
    return bool(
        sent > 0
        and deltas["requests"] == sent
        and deltas["messages"] == messages
        and deltas["request_seconds_count"] == messages
        and deltas["errors_total"] == 0
        and deltas["batches"] == after["batches"] - before["batches"] > 0
        and deltas["batch_rows"] == after["rows"] - before["rows"]
        and 0 < deltas["batch_rows"] <= sent
        and deltas["received_bytes"] > 0
        and deltas["sent_bytes"] > 0
    )


# -- the guest: predictor, endpoint and probe port ---------------------------------------------


async def _guest(
    report: Any,
    fed: str,
    addresses: dict[str, str],
    model_path: str,
    max_batch: int,
    max_wait: float,
    stop: Any,
) -> dict[str, Any]:
    """Serve until the client sets ``stop``; the endpoint's and the probe's URLs go to the
    parent as soon as both listen."""
    from benchmarks.inference import HOST_TIMEOUT
    from p2pboost.app._probe import NodeCollector, serve_probe
    from p2pboost.certs import TLSConfig
    from p2pboost.hetero.inference.endpoint import probe_routes, serve_endpoint
    from p2pboost.hetero.inference.predictor import GuestPredictor
    from p2pboost.hetero.model import GuestModel
    from p2pboost.metrics import EndpointMetrics, endpoint_metrics
    from p2pboost.net.node import Node

    model = GuestModel.load(model_path)
    tls = TLSConfig.from_dir(Path(fed) / GUEST)
    metrics = endpoint_metrics()
    if not isinstance(metrics, EndpointMetrics):
        raise SystemExit("--endpoint needs prometheus-client: pip install 'p2pboost[metrics]'")
    async with (
        Node(GUEST, peers=addresses, tls=tls) as node,
        GuestPredictor(
            node,
            model,
            output="margin",
            max_batch=max_batch,
            max_wait=max_wait,
            host_timeout=HOST_TIMEOUT,
        ) as predictor,
    ):
        metrics.add_collector(NodeCollector(node))
        loop = asyncio.get_running_loop()
        urls: dict[str, asyncio.Future[str]] = {k: loop.create_future() for k in ("ws", "probe")}
        tasks = [
            asyncio.create_task(
                serve_endpoint(
                    predictor,
                    "127.0.0.1:0",
                    tls=tls,
                    ready=urls["ws"].set_result,
                    metrics=metrics,
                )
            ),
            asyncio.create_task(
                serve_probe(
                    "127.0.0.1:0", probe_routes(predictor, metrics), urls["probe"].set_result
                )
            ),
        ]
        try:
            report("endpoint", await urls["ws"])
            report("probe", await urls["probe"])
            while not stop.is_set():
                await asyncio.sleep(0.05)
                for task in tasks:
                    if task.done():
                        task.result()  # a server that failed: say why
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        stats = predictor.stats()
    return {"batches": stats.batches, "trees": predictor.forest.n_trees}


# -- the client application -------------------------------------------------------------------


def _requests(ids: npt.NDArray[Any], X: npt.NDArray[np.float64]) -> list[dict[str, Any]]:
    """The JSON requests of every row (``null`` for a missing value)."""
    return [
        {"id": int(i), "features": [None if v != v else float(v) for v in row]}
        for i, row in zip(ids.tolist(), X.tolist(), strict=True)
    ]


async def _pass(url: str, tls: Any, requests: list[dict[str, Any]], group: int) -> list[Any]:
    """Every request as one pipelined stream, ``group`` per message; the scores in order."""
    from p2pboost.hetero.inference.endpoint import stream_scores

    out = []
    async for reply in stream_scores(url, requests, tls=tls, server_party=GUEST, group=group):
        if "score" not in reply:
            raise RuntimeError(f"the endpoint answered {reply}")
        out.append(reply["score"])
    return out


async def _one_at_a_time(url: str, tls: Any, requests: list[dict[str, Any]]) -> list[float]:
    """One connection sending its next request when the last is answered; the latencies."""
    from p2pboost.hetero.inference.endpoint import stream_scores

    answered = asyncio.Event()
    started: list[float] = []
    times: list[float] = []

    async def paced() -> AsyncIterator[dict[str, Any]]:
        for request in requests:
            answered.clear()
            started.append(time.perf_counter())
            yield request
            await answered.wait()

    async for reply in stream_scores(url, paced(), tls=tls, server_party=GUEST):
        times.append(time.perf_counter() - started[-1])
        if "score" not in reply:
            raise RuntimeError(f"the endpoint answered {reply}")
        answered.set()
    return times


async def _client(
    report: Any,
    fed: str,
    url: str,
    probe: str,
    csv: str,
    clients: int,
    requests: int,
    warmup: int,
    repeats: int,
    group: int,
    seed: int,
    stop: Any,
) -> dict[str, Any]:
    """Warm up, scrape, send the timed load, scrape again; then tell the guest to stop."""
    import json

    from p2pboost.certs import TLSConfig
    from p2pboost.hetero.inference.feature_store import ArrayStore

    try:
        tls = TLSConfig.from_dir(Path(fed) / APP)
        store = ArrayStore.from_csv(csv, "id", exclude=["y"])
        ids = store.ids()
        X, _ = store.lookup_now(ids)
        every = _requests(ids, X)
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, ids.size, (clients, warmup + requests))
        scores = await _pass(url, tls, every, group)  # the warm-up pass: the exactness check
        if warmup:
            await asyncio.gather(
                *(_one_at_a_time(url, tls, [every[r] for r in p[:warmup]]) for p in picks)
            )
        texts = [await asyncio.to_thread(scrape, probe)]
        health = [json.loads(await asyncio.to_thread(scrape, probe, "/healthz"))]
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            await _pass(url, tls, every, group)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        per_client = await asyncio.gather(
            *(_one_at_a_time(url, tls, [every[r] for r in p[warmup:]]) for p in picks)
        )
        wall = time.perf_counter() - t0
        texts.append(await asyncio.to_thread(scrape, probe))
        health.append(json.loads(await asyncio.to_thread(scrape, probe, "/healthz")))
    finally:
        stop.set()
    return {
        "ids": ids,
        "scores": np.asarray(scores, dtype=np.float64),
        "pass_s": times,
        "latency_s": [t for ts in per_client for t in ts],
        "latency_wall_s": wall,
        "sent": repeats * len(every) + clients * requests,
        "messages": repeats * -(-len(every) // group) + clients * requests,
        "metrics": texts,
        "health": health,
    }


# -- the parent ---------------------------------------------------------------------------------


def measure(
    fed: Path,
    models: Path,
    directory: Path,
    dataset: str,
    blocks: Sequence[list[str]],
    load: Any,
    group: int,
    profile: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hosts, the guest's endpoint and a client, each in its own process: the client's
    results and the guest's. ``profile``: write each process's :mod:`cProfile` file there."""
    from benchmarks.inference import start_hosts
    from p2pboost.app._local import LocalParties

    def prof(name: str) -> str | None:
        return str(profile / f"{name}.prof") if profile is not None else None

    stop = multiprocessing.get_context("spawn").Event()
    with LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties:
        addresses = start_hosts(parties, fed, models, directory, dataset, blocks, 1, prof)
        parties.start(
            GUEST,
            _guest,
            profile=prof(GUEST),
            fed=str(fed),
            addresses=addresses,
            model_path=str(models / "guest.json"),
            max_batch=load.max_batch,
            max_wait=load.max_wait,
            stop=stop,
        )
        url, probe = parties.expect(GUEST, "endpoint"), parties.expect(GUEST, "probe")
        parties.start(
            APP,
            _client,
            profile=prof(APP),
            fed=str(fed),
            url=url,
            probe=probe,
            csv=str(directory / f"{dataset}_hetero_guest.csv"),
            clients=load.clients,
            requests=load.requests,
            warmup=load.warmup,
            repeats=load.repeats,
            group=group,
            seed=load.seed,
            stop=stop,
        )
        results = parties.wait()
    return results[APP], results[GUEST]


def _ms(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1e3)


def run(
    args: Any,
    fed: Path,
    models: Path,
    directory: Path,
    blocks: Sequence[list[str]],
    load: Any,
    core: Any,
    profile: Path | None = None,
) -> int:
    """Measure, print the table and the JSON line. ``core(ids)``: the core's margins;
    ``profile``: where the processes' :mod:`cProfile` files go (slower figures)."""
    from p2pboost.hetero.model import GuestModel

    client, guest = measure(fed, models, directory, args.dataset, blocks, load, args.group, profile)
    params = GuestModel.load(models / "guest.json").params
    n = int(client["ids"].size)
    max_abs_diff = float(np.max(np.abs(client["scores"] - core(client["ids"]))))
    rows_per_s = n / float(np.median(client["pass_s"]))
    latency = client["latency_s"]
    requests_per_s = len(latency) / client["latency_wall_s"]
    before, after = (parse_samples(text) for text in client["metrics"])
    deltas = metric_deltas(before, after)
    health = (client["health"][0], client["health"][1])
    moved = counters_moved(deltas, client["sent"], client["messages"], health)
    batches = deltas["batches"]
    rounds = (
        {h: sent / batches for h, sent in deltas["node_sent_messages"].items()} if batches else {}
    )
    rows: list[tuple[str, Any]] = [
        ("dataset / rows / trees", f"{args.dataset} / {n} / {guest['trees']}"),
        (f"rows_per_s (every row, {args.group} per message; median of {args.repeats})", rows_per_s),
        (
            f"latency ms p50 / p90 / p99 / max ({args.clients} clients x {args.requests})",
            " / ".join(f"{_ms(latency, q):.2f}" for q in (50, 90, 99, 100)),
        ),
        ("requests per s", requests_per_s),
        ("max |endpoint - core margin| (every row)", max_abs_diff),
        ("-- /metrics over the probe port: after - before the timed load", ""),
        ("requests sent / counted", f"{client['sent']} / {deltas['requests']:g}"),
        (
            "messages sent / latency histogram count",
            f"{client['messages']} / {deltas['messages']:g}",
        ),
        ("micro-batches / rows in them", f"{batches:g} / {deltas['batch_rows']:g}"),
        ("errors counted", deltas["errors_total"]),
        ("bytes received / sent", f"{deltas['received_bytes']:g} / {deltas['sent_bytes']:g}"),
        ("node messages per micro-batch", ", ".join(f"{h} {v:.3g}" for h, v in rounds.items())),
        ("counters_moved", moved),
    ]
    if profile is not None:
        rows.append(("cProfile files (profiled: slower)", str(profile)))
    print_table(rows, f"federated inference through the endpoint (mTLS), {args.dataset}")
    emit_json(
        {
            "benchmark": "inference",
            "mode": "endpoint",
            "dataset": args.dataset,
            "trees": guest["trees"],
            "depth": params.max_depth,
            "hosts": len(blocks),
            "clients": args.clients,
            "group": args.group,
            "rows_per_s": round(rows_per_s, 1),
            "p50_ms": round(_ms(latency, 50), 3),
            "p99_ms": round(_ms(latency, 99), 3),
            "requests_per_s": round(requests_per_s, 1),
            "max_abs_diff": max_abs_diff,
            "requests_sent": client["sent"],
            "messages_sent": client["messages"],
            "metrics": deltas,
            "counters_moved": moved,
        }
    )
    return 0 if moved else 1
