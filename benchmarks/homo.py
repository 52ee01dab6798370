"""Horizontal SecureBoost benchmark: a server and clients as separate processes over mTLS.

``python -m benchmarks homo --dataset default_credit --clients 3``

Every party is its own process (spawned) with its own node, talking over TLS 1.3 WebSockets on
127.0.0.1 with certificates from a throw-away CA. Client ``i`` holds the rows of
``NAME_homo_guest.csv``, ``NAME_homo_host.csv`` or ``NAME_homo_host_<i>.csv``; the model is
tested on ``NAME_homo_test.csv``. In the same run:

* the same training with masking switched off (``masking=False``, an explicit insecure opt-in
  used only for this comparison): ``s_per_tree_unmasked``;
* the plaintext core trained on the union of the clients' rows: ``identical_trees`` (the
  federated edges equal the core's on the union, so no edges are passed);
* ``xgboost`` (``tree_method="hist"``, same bins, depth, learning rate, lambda, trees).

``s_per_tree`` is the server's wall time from the end of setup (keys, statistics, federated
binning) to the end of training, divided by the trees; setup is reported on its own. Runs of
the two modes alternate ``--repeat`` times and medians are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table, read_csv
from p2pboost import certs
from p2pboost.app._local import LocalParties, Report
from p2pboost.certs import TLSConfig
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.metrics import auc
from p2pboost.gbdt.params import BoostParams
from p2pboost.net.node import Node, NodeConfig

SERVER = "server"
#: How long one federated run may take before every party is stopped (seconds).
PARTY_TIMEOUT = 3600.0
NODE_CONFIG = NodeConfig(heartbeat_interval=1.0, heartbeat_timeout=30.0)


def _client_files(dataset: str, n: int, root: Path) -> list[Path]:
    names = [f"{dataset}_homo_guest.csv"]
    if n == 2 and (root / f"{dataset}_homo_host.csv").exists():
        names.append(f"{dataset}_homo_host.csv")
    else:
        names += [f"{dataset}_homo_host_{i}.csv" for i in range(1, n)]
    paths = [root / name for name in names]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such data files for {n} clients: {', '.join(missing)}")
    return paths


def _load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    header, values = read_csv(path)
    y_col, first = header.index("y"), header.index("y") + 1
    return values[:, first:], values[:, y_col]


async def _server(
    report: Report, fed: str, clients: list[str], params: dict[str, Any], masking: bool
) -> dict[str, Any]:
    from p2pboost.homo.estimators import HomoServer

    async with Node(
        SERVER,
        listen="wss://127.0.0.1:0",
        peers=dict.fromkeys(clients),
        tls=TLSConfig.from_dir(Path(fed) / SERVER),
        config=NODE_CONFIG,
    ) as node:
        report("address", node.address)
        server = HomoServer(BoostParams.from_dict(params), masking=masking)
        await server.afit(node, clients)
        r = server.result_
        return {
            "seconds_trees": r.seconds_trees,
            "seconds_setup": r.seconds_setup,
            "n_trees": r.n_trees,
            "rounds": r.rounds,
            "model": r.booster.to_dict(),
        }


async def _client(
    report: Report,
    fed: str,
    me: str,
    address: str,
    path: str,
    params: dict[str, Any],
    masking: bool,
) -> dict[str, Any]:
    from p2pboost.homo.estimators import HomoClient

    X, y = _load(Path(path))
    async with Node(
        me,
        peers={SERVER: address},
        tls=TLSConfig.from_dir(Path(fed) / me),
        config=NODE_CONFIG,
    ) as node:
        client = HomoClient(BoostParams.from_dict(params), identity=Path(fed) / me, masking=masking)
        await client.afit(node, SERVER, X, y)
        model: dict[str, Any] = client.model_.to_dict()
        return model


def run_federation(
    fed: Path, files: list[Path], params: BoostParams, masking: bool
) -> tuple[dict[str, Any], list[Booster]]:
    """One training run, every party in its own process; the server's stats and the models."""
    clients = [f"client{i + 1}" for i in range(len(files))]
    p = params.to_dict()
    with LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties:
        parties.start(SERVER, _server, fed=str(fed), clients=clients, params=p, masking=masking)
        address = parties.expect(SERVER, "address")
        for c, path in zip(clients, files, strict=True):
            parties.start(
                c,
                _client,
                fed=str(fed),
                me=c,
                address=address,
                path=str(path),
                params=p,
                masking=masking,
            )
        results = parties.wait()
    return results[SERVER], [Booster.from_dict(results[c]) for c in clients]


def _same_trees(a: Booster, b: Booster) -> bool:
    if len(a.trees) != len(b.trees) or not np.array_equal(a.base_margin, b.base_margin):
        return False
    return json.dumps([t.to_dict() for t in a.trees]) == json.dumps([t.to_dict() for t in b.trees])


def _xgboost_auc(
    params: BoostParams, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray
) -> float:
    import xgboost as xgb

    model = xgb.XGBClassifier(
        n_estimators=params.n_estimators,
        max_depth=params.max_depth,
        learning_rate=params.learning_rate,
        reg_lambda=params.reg_lambda,
        max_bin=params.max_bin,
        tree_method="hist",
        n_jobs=1,
    )
    model.fit(X, y)
    return auc(yt, model.predict_proba(Xt)[:, 1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks homo", description=__doc__)
    parser.add_argument("--dataset", default="default_credit")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--trees", type=int, default=20)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    root = data_dir(args.data_dir)
    files = _client_files(args.dataset, args.clients, root)
    params = BoostParams(
        n_estimators=args.trees, max_depth=args.depth, max_bin=args.bins, learning_rate=args.lr
    ).validate()
    parts = [_load(f) for f in files]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    Xt, yt = _load(root / f"{args.dataset}_homo_test.csv")

    masked: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        fed = Path(tmp)
        certs.init(fed, [SERVER, *(f"client{i + 1}" for i in range(len(files)))])
        models: list[Booster] = []
        for _ in range(args.repeat):
            stats, models = run_federation(fed, files, params, masking=True)
            masked.append(stats)
            plain.append(run_federation(fed, files, params, masking=False)[0])
    t0 = time.perf_counter()
    core = train(params, X, y)
    core_seconds = time.perf_counter() - t0

    def per_tree(runs: list[dict[str, Any]]) -> float:
        return statistics.median(r["seconds_trees"] / r["n_trees"] for r in runs)

    server_model = Booster.from_dict(masked[-1]["model"])
    identical = _same_trees(server_model, core) and all(_same_trees(m, core) for m in models)
    agree = all(_same_trees(m, server_model) for m in models)
    fed_auc = auc(yt, models[0].predict(Xt))
    xgb_auc = _xgboost_auc(params, X, y, Xt, yt)
    s_tree, s_plain = per_tree(masked), per_tree(plain)
    print_table(
        [
            ("dataset", args.dataset),
            ("clients", len(files)),
            ("rows (union)", X.shape[0]),
            ("features", X.shape[1]),
            (
                "trees / depth / bins",
                f"{params.n_estimators} / {params.max_depth} / {params.max_bin}",
            ),
            ("aggregation rounds (masked run)", masked[-1]["rounds"]),
            (
                "setup s (keys, stats, binning)",
                statistics.median(r["seconds_setup"] for r in masked),
            ),
            ("s per tree, masked", s_tree),
            ("s per tree, unmasked (insecure opt-in)", s_plain),
            ("masked / unmasked", s_tree / s_plain),
            ("core on the union, s per tree", core_seconds / params.n_estimators),
            ("every client holds the server's model", agree),
            ("trees identical to the core on the union", identical),
            ("test AUC (federated)", fed_auc),
            ("test AUC (xgboost on the union)", xgb_auc),
        ],
        f"homo SecureBoost, {args.dataset}, {len(files)} clients (separate processes, mTLS)",
    )
    emit_json(
        {
            "benchmark": "homo",
            "dataset": args.dataset,
            "clients": len(files),
            "s_per_tree": round(s_tree, 5),
            "s_per_tree_unmasked": round(s_plain, 5),
            "auc": round(fed_auc, 6),
            "xgboost_auc": round(xgb_auc, 6),
            "identical_trees": identical,
        }
    )
    return 0
