"""Horizontal SecureBoost benchmark: a server and clients as separate processes over mTLS.

``python -m benchmarks homo --dataset default_credit --clients 3``
``python -m benchmarks homo --dataset student --clients 2 --objective reg:pseudohubererror``
``python -m benchmarks homo --dataset default_credit --clients 3 --goss`` (or ``--subsample R``)
``python -m benchmarks homo --dataset default_credit --clients 3 --eval-metric auc``

Every party is its own process (spawned) with its own node, talking over TLS 1.3 WebSockets on
127.0.0.1 with certificates from a throw-away CA. Client ``i`` holds the rows of
``NAME_homo_guest.csv``, ``NAME_homo_host.csv`` or ``NAME_homo_host_<i>.csv`` (features chosen
by name: ``x0``, ``x1``, ...); the model is tested on ``NAME_homo_test.csv``. In the same run:

* the same training with masking switched off (``masking=False``, an explicit insecure opt-in
  used only for this comparison): ``s_per_tree_unmasked``;
* the plaintext core trained on the union of the clients' rows: ``identical_trees`` (the
  federated edges equal the core's on the union, so no edges are passed; with ``--subsample``
  or ``--goss`` the core is given the clients' draws, rebuilt from the round seeds by the
  library's own :func:`~p2pboost.homo._sampling.union_draws`);
* ``xgboost`` (``tree_method="hist"``, same objective, bins, depth, learning rate, lambda,
  trees, subsample; GOSS has no XGBoost counterpart, so that reference samples no rows), for
  the objectives XGBoost has.

``--eval-metric M``: each client keeps a seeded quarter of its rows for validation; the
federation evaluates ``M`` on the union of those rows after every round from securely
aggregated sums (AUC: score histograms), and the final model is scored exactly on the same
rows: ``valid_M_federated`` against ``valid_M_plaintext``.

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
from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.metrics import accuracy, auc, get_metric, rmse
from p2pboost.gbdt.objectives import canonical_objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo._sampling import union_draws
from p2pboost.homo.config import HomoConfig
from p2pboost.net.node import Node, NodeConfig

SERVER = "server"
#: How long one federated run may take before every party is stopped (seconds).
PARTY_TIMEOUT = 3600.0
NODE_CONFIG = NodeConfig(heartbeat_interval=1.0, heartbeat_timeout=30.0)
#: The share of each client's rows kept for validation with ``--eval-metric`` (seeded).
VALID_SHARE = 0.25
#: Objectives XGBoost has too (the reference regressor); p2pboost's others have no counterpart.
XGBOOST_REGRESSION = (
    "reg:squarederror",
    "reg:pseudohubererror",
    "reg:tweedie",
    "reg:absoluteerror",
)


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
    """Features ``x0, x1, ...`` (by name: some files put ``y`` among them) and the label."""
    header, values = read_csv(path)
    features = sorted((c for c in header if c.startswith("x")), key=lambda c: int(c[1:]))
    return values[:, [header.index(c) for c in features]], values[:, header.index("y")]


def client_rows(
    path: Path, index: int, validate: bool
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Client ``index``'s training rows and, when validating, its validation rows: a seeded
    ``VALID_SHARE`` of its file (the same split in the client's process and in the report)."""
    X, y = _load(path)
    if not validate:
        return X, y, None
    order = np.random.default_rng([0, index]).permutation(y.size)
    n_valid = round(VALID_SHARE * y.size)
    valid, rest = np.sort(order[:n_valid]), np.sort(order[n_valid:])
    return X[rest], y[rest], (X[valid], y[valid])


async def _server(
    report: Report,
    fed: str,
    clients: list[str],
    params: dict[str, Any],
    masking: bool,
    eval_metric: str | None,
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
        server = HomoServer(BoostParams.from_dict(params), masking=masking, eval_metric=eval_metric)
        await server.afit(node, clients)
        r = server.result_
        return {
            "seconds_trees": r.seconds_trees,
            "seconds_setup": r.seconds_setup,
            "n_trees": r.n_trees,
            "rounds": r.rounds,
            "evaluation": r.evaluation,
            "model": r.booster.to_dict(),
        }


async def _client(
    report: Report,
    fed: str,
    me: str,
    index: int,
    address: str,
    path: str,
    params: dict[str, Any],
    masking: bool,
    eval_metric: str | None,
) -> dict[str, Any]:
    from p2pboost.homo.estimators import HomoClient

    X, y, valid = client_rows(Path(path), index, eval_metric is not None)
    async with Node(
        me,
        peers={SERVER: address},
        tls=TLSConfig.from_dir(Path(fed) / me),
        config=NODE_CONFIG,
    ) as node:
        client = HomoClient(
            BoostParams.from_dict(params),
            identity=Path(fed) / me,
            masking=masking,
            eval_metric=eval_metric,
        )
        await client.afit(node, SERVER, X, y, eval_set=valid)
        model: dict[str, Any] = client.model_.to_dict()
        return model


def run_federation(
    fed: Path,
    files: list[Path],
    params: BoostParams,
    masking: bool,
    eval_metric: str | None = None,
) -> tuple[dict[str, Any], list[Booster]]:
    """One training run, every party in its own process; the server's stats and the models."""
    clients = client_names(len(files))
    p = params.to_dict()
    with LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties:
        parties.start(
            SERVER,
            _server,
            fed=str(fed),
            clients=clients,
            params=p,
            masking=masking,
            eval_metric=eval_metric,
        )
        address = parties.expect(SERVER, "address")
        for i, (c, path) in enumerate(zip(clients, files, strict=True)):
            parties.start(
                c,
                _client,
                fed=str(fed),
                me=c,
                index=i,
                address=address,
                path=str(path),
                params=p,
                masking=masking,
                eval_metric=eval_metric,
            )
        results = parties.wait()
    return results[SERVER], [Booster.from_dict(results[c]) for c in clients]


def client_names(n: int) -> list[str]:
    """The clients' party ids (their row draws depend on them)."""
    return [f"client{i + 1}" for i in range(n)]


def _same_trees(a: Booster, b: Booster) -> bool:
    """The same trees, node for node; covers and gains compared only where both models carry
    them (a client's copy has zeros unless the server shares them: ``share_statistics``)."""
    if len(a.trees) != len(b.trees) or not np.array_equal(a.base_margin, b.base_margin):
        return False

    def bare(booster: Booster) -> str:
        return json.dumps([{**t.to_dict(), "gain": [], "cover": []} for t in booster.trees])

    both = all(t.cover.any() for t in [*a.trees, *b.trees])
    if both:
        return json.dumps([t.to_dict() for t in a.trees]) == json.dumps(
            [t.to_dict() for t in b.trees]
        )
    return bare(a) == bare(b)


def _test_metric(params: BoostParams) -> str:
    """The test-set metric of the objective: AUC, accuracy or RMSE."""
    objective = canonical_objective(params.objective)
    if objective == "binary:logistic":
        return "auc"
    return "accuracy" if objective.startswith("multi:") else "rmse"


def _xgboost(
    params: BoostParams, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray
) -> tuple[float | None, str | None]:
    """XGBoost's test metric on the union (same settings), or None and why it was skipped."""
    import xgboost as xgb

    objective = canonical_objective(params.objective)
    common: dict[str, Any] = {
        "n_estimators": params.n_estimators,
        "max_depth": params.max_depth,
        "learning_rate": params.learning_rate,
        "reg_lambda": params.reg_lambda,
        "max_bin": params.max_bin,
        "subsample": params.subsample,
        "tree_method": "hist",
        "n_jobs": 1,
    }
    if objective == "binary:logistic":
        clf = xgb.XGBClassifier(**common).fit(X, y)
        return auc(yt, clf.predict_proba(Xt)[:, 1]), None
    if objective.startswith("multi:"):
        clf = xgb.XGBClassifier(**common).fit(X, y)
        return accuracy(yt, clf.predict_proba(Xt)), None
    if objective not in XGBOOST_REGRESSION:
        return None, f"xgboost has no {objective}"
    extra: dict[str, Any] = {"objective": objective}
    if objective == "reg:pseudohubererror":
        extra["huber_slope"] = params.huber_delta
    if objective == "reg:tweedie":
        extra["tweedie_variance_power"] = params.tweedie_variance_power
    if params.base_score is not None:
        extra["base_score"] = params.base_score
    elif get_objective(params).median_start:  # the core's start, which xgboost estimates its way
        extra["base_score"] = float(np.median(y))
    reg = xgb.XGBRegressor(**common, **extra).fit(X, y)
    return rmse(yt, reg.predict(Xt)), None


def _check_settings(params: BoostParams, eval_metric: str | None) -> None:
    """End the benchmark with the library's own words if horizontal training refuses these
    settings."""
    try:
        HomoConfig(params=params, eval_metric=eval_metric).validate()
    except InputError as exc:
        raise SystemExit(f"homo training refuses these settings: {exc}") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks homo", description=__doc__)
    parser.add_argument("--dataset", default="default_credit")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--objective", default="binary:logistic")
    parser.add_argument("--subsample", type=float, default=1.0)
    parser.add_argument("--goss", action="store_true")
    parser.add_argument("--eval-metric", default=None)
    parser.add_argument("--trees", type=int, default=20)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    root = data_dir(args.data_dir)
    files = _client_files(args.dataset, args.clients, root)
    validate = args.eval_metric is not None
    parts = [client_rows(f, i, validate) for i, f in enumerate(files)]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    Xt, yt = _load(root / f"{args.dataset}_homo_test.csv")
    settings: dict[str, Any] = {
        "objective": args.objective,
        "n_estimators": args.trees,
        "max_depth": args.depth,
        "max_bin": args.bins,
        "learning_rate": args.lr,
        "subsample": args.subsample,
        "goss": args.goss,
    }
    try:
        if canonical_objective(args.objective).startswith("multi:"):
            settings["num_class"] = int(np.unique(y).size)
        params = BoostParams(**settings).validate()
    except InputError as exc:
        raise SystemExit(str(exc)) from None
    _check_settings(params, args.eval_metric)

    masked: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        fed = Path(tmp)
        certs.init(fed, [SERVER, *client_names(len(files))])
        models: list[Booster] = []
        for _ in range(args.repeat):
            stats, models = run_federation(fed, files, params, True, args.eval_metric)
            masked.append(stats)
            plain.append(run_federation(fed, files, params, False, args.eval_metric)[0])
    # The core on the union, given the clients' row draws (none without sampling).
    sizes = [p[1].size for p in parts]
    draws = union_draws(params, list(zip(client_names(len(files)), sizes, strict=True)))
    t0 = time.perf_counter()
    core = train(params, X, y, row_sample=draws.row_sample, goss_sample=draws.goss_sample)
    core_seconds = time.perf_counter() - t0

    def per_tree(runs: list[dict[str, Any]]) -> float:
        return statistics.median(r["seconds_trees"] / r["n_trees"] for r in runs)

    server_model = Booster.from_dict(masked[-1]["model"])
    identical = _same_trees(server_model, core) and all(_same_trees(m, core) for m in models)
    agree = all(_same_trees(m, server_model) for m in models)
    metric = _test_metric(params)
    fed_score = get_metric(metric)(yt, models[0].predict(Xt))
    xgb_score, xgb_skipped = _xgboost(params, X, y, Xt, yt)
    s_tree, s_plain = per_tree(masked), per_tree(plain)
    rows: list[tuple[str, Any]] = [
        ("dataset", args.dataset),
        ("clients", len(files)),
        ("objective", params.objective),
        (
            "row sampling",
            f"GOSS {params.top_rate:g} + {params.other_rate:g}"
            if params.goss
            else f"subsample {params.subsample:g}",
        ),
        ("rows (union, training)", X.shape[0]),
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
        (f"test {metric} (federated)", fed_score),
        (
            f"test {metric} (xgboost on the union)",
            xgb_score if xgb_skipped is None else f"skipped: {xgb_skipped}",
        ),
    ]
    result: dict[str, Any] = {
        "benchmark": "homo",
        "dataset": args.dataset,
        "clients": len(files),
        "objective": params.objective,
        "subsample": params.subsample,
        "goss": params.goss,
        "s_per_tree": round(s_tree, 5),
        "s_per_tree_unmasked": round(s_plain, 5),
        "masking_overhead": round(s_tree / s_plain, 3),
        "metric": metric,
        metric: round(fed_score, 6),
        f"xgboost_{metric}": None if xgb_score is None else round(xgb_score, 6),
        "identical_trees": identical,
    }
    if xgb_skipped is not None:
        result["xgboost_skipped"] = xgb_skipped
    if validate:
        m = args.eval_metric
        federated = masked[-1]["evaluation"][-1]
        Xv = np.vstack([p[2][0] for p in parts if p[2] is not None])
        yv = np.concatenate([p[2][1] for p in parts if p[2] is not None])
        exact = get_metric(m)(yv, server_model.predict(Xv))
        rows += [
            ("validation rows (union)", yv.size),
            (f"validation {m}, federated (aggregated)", federated),
            (f"validation {m}, the final model scored exactly", exact),
        ]
        result["eval_metric"] = m
        result["valid_rows"] = int(yv.size)
        result[f"valid_{m}_federated"] = round(federated, 6)
        result[f"valid_{m}_plaintext"] = round(exact, 6)
        result[f"valid_{m}_abs_diff"] = round(abs(federated - exact), 6)
    print_table(
        rows, f"homo SecureBoost, {args.dataset}, {len(files)} clients (separate processes, mTLS)"
    )
    emit_json(result)
    return 0
