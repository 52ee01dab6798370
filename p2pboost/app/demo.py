"""``p2pboost demo``: a real federation on this machine, on data that needs no download.

Modes (all on scikit-learn's bundled breast-cancer data: 569 rows, 30 features, a seeded
2/3 : 1/3 train/test split):

* ``hetero`` (default): vertical SecureBoost. Two parties, the same rows: the *guest* holds
  the label and the first 10 features, the *host* the other 20. Gradients travel
  Paillier-encrypted; the host never sees a label, the guest never sees a host threshold.
* ``homo``: horizontal SecureBoost. Two clients ``c1`` and ``c2`` hold disjoint halves of the
  training rows (all 30 features, their own labels); a ``server`` holding no data sees only
  securely aggregated histograms. Each client ends with the model and predicts locally.
* ``plain``: the plaintext core in this process, the reference the federated modes equal.

Every mode also runs on the user's own data. Hetero (:func:`csv_vertical`, the CLI's
``--guest`` and ``--host``): two CSVs sharing an id column, the guest's with a 0/1 label. As
every party runs on this machine, the rows are matched by id here; ``p2pboost party`` matches
them with private set intersection, as separate organisations must. Homo and plain
(:func:`csv_labelled`, the CLI's ``--client`` per client, or ``--data``): CSVs with the same
feature columns and a 0/1 label, one per client; each file's rows are split 2/3 : 1/3 and
the test rows of all files make the test set.

The federated modes are real runs, not simulations: every party is a separate process
(``spawn``) with its own event loop and :class:`~p2pboost.net.node.Node`, talking over WebSockets
with mutual TLS on 127.0.0.1, with a CA and certificates made for the run in a temporary
directory (deleted afterwards). The party whose id sorts first dials (guest -> host,
c1/c2 -> server), so the host or the server listens on a free port and reports its address.
This parent process only hands each party its share of the data, relays that address, prints
the parties' progress and collects their results; it never carries their traffic. If a party
fails, dies or the run passes its deadline, every party (with its worker processes) is killed
and the failure is raised as one clear error: the command never hangs.

The last line the CLI prints is one JSON object: ``mode``, ``trees``, ``s_per_tree`` (training
wall time per tree, key generation and connection set-up included), ``metric`` and the test
metric's value under the metric's name (``"auc": ...``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.app._local import LocalParties, Report
from p2pboost.app._progress import TreeClock
from p2pboost.app.demo_data import LabelledData, VerticalData, csv_labelled, csv_vertical
from p2pboost.crypto.keys import SCHEMES
from p2pboost.exceptions import ConfigError, P2PBoostError
from p2pboost.gbdt.metrics import auc
from p2pboost.gbdt.params import BoostParams

__all__ = [
    "DEFAULT_KEY_BITS",
    "DEFAULT_MODE",
    "DEFAULT_TIMEOUT",
    "MODES",
    "DemoResult",
    "LabelledData",
    "TreeProgress",
    "VerticalData",
    "csv_labelled",
    "csv_vertical",
    "run_demo",
]

F64 = npt.NDArray[np.float64]
Progress = Callable[[str], None]
#: ``(party, trees done, trees in all, label)`` after every tree (the CLI draws a bar).
TreeProgress = Callable[[str, int, int, str], None]

MODES = ("hetero", "homo", "plain")
DEFAULT_MODE = "hetero"
#: Paillier key size of the demo. Real deployments default to 2048 bits
#: (:class:`~p2pboost.hetero.config.HeteroConfig`); the demo trades that for speed.
DEFAULT_KEY_BITS = 1024
SECURE_KEY_BITS = 2048
#: Seconds before every party is killed and the demo fails with DeadlineExceeded.
DEFAULT_TIMEOUT = 300.0
#: Features the hetero guest holds (the first ones); the host holds the rest.
GUEST_FEATURES = 10

LEARNING_RATE = 0.3
MAX_BIN = 32


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo measured."""

    mode: str
    trees: int
    s_per_tree: float
    metric: str
    value: float

    def to_json(self) -> str:
        return json.dumps(
            {
                "mode": self.mode,
                "trees": self.trees,
                "s_per_tree": round(self.s_per_tree, 6),
                "metric": self.metric,
                self.metric: round(self.value, 6),
            }
        )


def _load_breast_cancer() -> tuple[F64, F64]:
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as exc:  # pragma: no cover - dev extra always has it
        raise ConfigError(
            "the demo reads scikit-learn's bundled data: pip install 'p2pboost[dev]'"
        ) from exc
    data = load_breast_cancer()
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.float64)


def _split(seed: int) -> tuple[F64, F64, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Data, labels, train rows, test rows (a seeded 2/3 : 1/3 split)."""
    X, y = _load_breast_cancer()
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 3
    return X, y, order[n_test:], order[:n_test]


#: How the progress lines name each encryption scheme.
_SCHEME_NAMES = {"paillier": "Paillier", "ou": "Okamoto-Uchiyama"}


def run_demo(
    mode: str = DEFAULT_MODE,
    *,
    trees: int = 10,
    depth: int = 5,
    seed: int = 0,
    key_bits: int = DEFAULT_KEY_BITS,
    scheme: str = "paillier",
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    data: VerticalData | LabelledData | None = None,
    on_tree: TreeProgress | None = None,
    out: str | os.PathLike[str] | None = None,
) -> DemoResult:
    """Train and evaluate one demo model; see the module docstring.

    ``out``: a directory where every party writes its own model file (``<party>.json``: the
    guest's and the host's parts, or the homo model at the server and each client, or the
    plaintext model), to look at with ``p2pboost inspect``.

    ``key_bits`` (hetero only) below 2048 is an explicit opt-in to an insecure key size, made
    here on the user's behalf because the demo's data is public; ``scheme`` (hetero only) is
    ``"paillier"`` or ``"ou"``. ``progress`` receives short
    human-readable lines as the run goes, and ``on_tree`` (hetero) each tree's progress and
    test metric (default: as a ``progress`` line). ``data`` replaces the bundled data: a
    :class:`VerticalData` for hetero (:func:`csv_vertical`), a :class:`LabelledData` for homo
    (two parts or more: one per client) and plain (one part) (:func:`csv_labelled`).
    """
    if mode not in MODES:
        raise ConfigError(f"unknown demo mode {mode!r}; choose one of {', '.join(MODES)}")
    if trees < 1 or depth < 1:
        raise ConfigError("trees and depth must be at least 1")
    if not timeout > 0:
        raise ConfigError("timeout must be > 0")
    if isinstance(data, VerticalData) and mode != "hetero":
        raise ConfigError("the guest and host data are for --mode hetero")
    if isinstance(data, LabelledData):
        if mode == "hetero":
            raise ConfigError("--mode hetero takes a guest and a host CSV (--guest, --host)")
        if mode == "homo" and len(data.parts) < 2:
            raise ConfigError("--mode homo needs two client CSVs or more (--client, repeated)")
        if mode == "plain" and len(data.parts) != 1:
            raise ConfigError("--mode plain takes one CSV (--data)")
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown encryption scheme {scheme!r}; choose one of {SCHEMES}")
    say = progress or (lambda _line: None)
    out_dir = "" if out is None else os.fspath(Path(out).resolve())
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    labelled = data if isinstance(data, LabelledData) else None
    if mode == "plain":
        return _plain(trees, depth, seed, out_dir, labelled)
    params = BoostParams(
        n_estimators=trees, max_depth=depth, learning_rate=LEARNING_RATE, max_bin=MAX_BIN, seed=seed
    ).validate()
    if mode == "hetero":
        vertical = data if isinstance(data, VerticalData) else None
        return _hetero(params, seed, (key_bits, scheme), timeout, say, vertical, on_tree, out_dir)
    return _homo(params, seed, timeout, say, out_dir, labelled)


def _plain(
    trees: int, depth: int, seed: int, out: str = "", data: LabelledData | None = None
) -> DemoResult:
    # Here, not at the top: the estimators bring scikit-learn's import time with them.
    from p2pboost.gbdt.estimators import GBDTClassifier

    X, y, train, test = _split(seed) if data is None else data.joined_split(seed)
    model = GBDTClassifier(
        n_estimators=trees, max_depth=depth, learning_rate=LEARNING_RATE, max_bin=MAX_BIN
    )
    t0 = time.perf_counter()
    model.fit(X[train], y[train])
    elapsed = time.perf_counter() - t0
    if out:
        model.save_model(Path(out) / "plain.json")
    value = auc(y[test], model.predict_proba(X[test])[:, 1])
    return DemoResult("plain", trees, elapsed / trees, "auc", float(value))


# -- the federated modes: what the parent does -------------------------------------------------


def _bundled_vertical() -> VerticalData:
    X, y = _load_breast_cancer()
    return VerticalData(
        X[:, :GUEST_FEATURES],
        X[:, GUEST_FEATURES:],
        y,
        f"scikit-learn's breast-cancer data: guest label + {GUEST_FEATURES} features, host "
        f"{X.shape[1] - GUEST_FEATURES} features",
    )


def _hetero(
    params: BoostParams,
    seed: int,
    key: tuple[int, str],
    timeout: float,
    say: Progress,
    data: VerticalData | None = None,
    on_tree: TreeProgress | None = None,
    out: str = "",
) -> DemoResult:
    data = data or _bundled_vertical()
    train, test = data.split(seed)
    key_bits, scheme = key
    if key_bits < SECURE_KEY_BITS:
        say(
            f"note: the demo uses {key_bits}-bit {_SCHEME_NAMES[scheme]} keys for speed; real"
            " deployments "
            f"default to {SECURE_KEY_BITS} (try --key-bits {SECURE_KEY_BITS})"
        )
    say(
        f"hetero: {data.describe}; {len(train)} training and {len(test)} test rows; guest and "
        "host as separate processes over mutual-TLS WebSockets on 127.0.0.1"
    )
    host = _Job(
        "host",
        "host",
        params,
        peers={"guest": None},
        listen=True,
        X=data.X_host[train],
        X_test=data.X_host[test],
        out=out,
    )
    guest = _Job(
        "guest",
        "guest",
        params,
        peers={"host": ""},
        X=data.X_guest[train],
        y=data.y[train],
        X_test=data.X_guest[test],
        y_test=data.y[test],
        key_bits=key_bits,
        scheme=scheme,
        out=out,
    )
    results = _run_federation(host, [guest], ("guest", "host"), timeout, say, on_tree)
    return DemoResult(
        "hetero",
        params.n_estimators,
        results["guest"]["seconds"] / params.n_estimators,
        "auc",
        results["guest"]["auc"],
    )


def _homo(
    params: BoostParams,
    seed: int,
    timeout: float,
    say: Progress,
    out: str = "",
    data: LabelledData | None = None,
) -> DemoResult:
    if data is None:
        X, y, train, test = _split(seed)
        halves = {"c1": train[: len(train) // 2], "c2": train[len(train) // 2 :]}
    else:
        say(f"homo: {data.describe}")
        X, y, train, test = data.joined_split(seed)
        halves = {f"c{i + 1}": rows for i, rows in enumerate(data.client_rows(train))}
    shown = " and ".join(f"{c} ({len(r)} rows)" for c, r in halves.items())
    say(
        f"homo: clients {shown} and a server with no data, as separate processes over "
        "mutual-TLS WebSockets on 127.0.0.1"
    )
    server = _Job("server", "server", params, peers=dict.fromkeys(halves), listen=True, out=out)
    clients = [
        _Job(
            c,
            "client",
            params,
            peers={"server": ""},
            X=X[r],
            y=y[r],
            X_test=X[test],
            y_test=y[test],
            out=out,
        )
        for c, r in halves.items()
    ]
    results = _run_federation(server, clients, ("server", *halves), timeout, say)
    scores = {results[c]["auc"] for c in halves}
    if len(scores) != 1:  # every client holds the same model: a difference is a bug
        raise P2PBoostError(f"the clients' models disagree on the test set (AUCs {scores})")
    return DemoResult(
        "homo",
        params.n_estimators,
        results["server"]["seconds"] / params.n_estimators,
        "auc",
        scores.pop(),
    )


def _nothing() -> F64:
    return np.empty(0)


@dataclass(frozen=True, slots=True, eq=False)
class _Job:
    """What one party process gets: its role, its share of the data, whom it talks to.

    ``peers`` maps every other party to its address: ``None`` for one that dials us, ``""``
    for the listener until it has reported its address. Shares a party does not hold stay
    empty (the server holds no data; the host no labels).
    """

    party: str
    role: str
    params: BoostParams
    peers: Mapping[str, str | None]
    listen: bool = False
    X: F64 = field(default_factory=_nothing)
    y: F64 = field(default_factory=_nothing)
    X_test: F64 = field(default_factory=_nothing)
    y_test: F64 = field(default_factory=_nothing)
    key_bits: int = DEFAULT_KEY_BITS
    scheme: str = "paillier"
    cert_dir: str = ""
    #: Where the party writes its model file (``<party>.json``); empty: nowhere.
    out: str = ""

    def save(self, model: Any) -> None:
        if self.out:
            model.save(Path(self.out) / f"{self.party}.json")


def _run_federation(
    listener: _Job,
    dialers: list[_Job],
    parties: tuple[str, ...],
    timeout: float,
    say: Progress,
    on_tree: TreeProgress | None = None,
) -> dict[str, dict[str, float]]:
    """Run every party as a process; return each one's result, or kill them all and raise."""
    from p2pboost import certs

    tree = on_tree or (lambda party, _i, _n, label: say(f"{party}: {label}"))

    def on_message(party: str, kind: str, value: Any) -> None:
        if kind == "progress":
            say(f"{party}: {value}")
        elif kind == "tree" and isinstance(value, tuple) and len(value) == 3:
            tree(party, int(value[0]), int(value[1]), str(value[2]))
        else:
            raise P2PBoostError(f"demo party {party!r} sent an unexpected {kind!r} message")

    with tempfile.TemporaryDirectory(prefix="p2pboost-demo-") as tmp:
        certs.init(tmp, parties)
        say(f"certificates for {', '.join(parties)} made in a temporary directory")
        home = Path(tmp)
        with LocalParties("demo", timeout=timeout) as run:
            own = replace(listener, cert_dir=str(home / listener.party))
            run.start(listener.party, _party, job=own)
            address = run.expect(listener.party, "listening", on_message)
            say(f"{listener.party} listening on {address}")
            for job in dialers:
                peers = {p: (address if p == listener.party else a) for p, a in job.peers.items()}
                own = replace(job, peers=peers, cert_dir=str(home / job.party))
                run.start(job.party, _party, job=own)
            results: dict[str, dict[str, float]] = run.wait(on_message)
            return results


# -- the federated modes: what each party process does -----------------------------------------


async def _party(report: Report, job: _Job) -> dict[str, float]:
    from p2pboost.certs import TLSConfig
    from p2pboost.net.node import Node

    peers = {p: (a or None) for p, a in job.peers.items()}
    listen = "wss://127.0.0.1:0" if job.listen else None
    async with Node(
        job.party, listen=listen, peers=peers, tls=TLSConfig.from_dir(job.cert_dir)
    ) as node:
        if job.listen:
            report("listening", node.address)
        return await _ROLES[job.role](node, job, report)


async def _guest(node: Any, job: _Job, send: Report) -> dict[str, float]:
    from p2pboost.gbdt.callbacks import CallbackEnv
    from p2pboost.hetero.config import HeteroConfig
    from p2pboost.hetero.estimators import HeteroGuest

    n = job.params.n_estimators
    name = _SCHEME_NAMES[job.scheme]
    send("progress", f"training {n} trees ({job.key_bits}-bit {name} keys)...")
    t0 = time.perf_counter()
    clock = TreeClock()

    def tree_done(env: CallbackEnv) -> None:
        metrics = "".join(
            f" test {m} {v:.4f}" for scores in env.evaluation.values() for m, v in scores.items()
        )
        label = f"tree {env.iteration + 1}/{n}{metrics} {clock.lap()}"
        send("tree", (env.iteration + 1, n, label))

    config = HeteroConfig(
        key_bits=job.key_bits,
        allow_insecure_key=job.key_bits < SECURE_KEY_BITS,
        scheme=job.scheme,
    )
    guest = HeteroGuest(job.params, config=config)
    # The test rows as evaluation set: the metric after every tree (the host sends one bit
    # per test row and split node; the trees do not depend on it).
    test = [(job.X_test, job.y_test)]
    await guest.afit(node, ["host"], job.X, job.y, eval_set=test, callbacks=[tree_done])
    seconds = time.perf_counter() - t0
    job.save(guest)
    proba = await guest.apredict(node, job.X_test)
    value = _auc(job.y_test, proba)
    send("progress", f"test AUC {value:.4f} on {len(job.y_test)} rows")
    return {"seconds": seconds, "auc": value}


async def _host(node: Any, job: _Job, send: Report) -> dict[str, float]:
    from p2pboost.hetero.estimators import HeteroHost

    host = await HeteroHost().afit(node, "guest", job.X, eval_set=[job.X_test])
    job.save(host)
    send("progress", "trained; serving the guest's test predictions")
    await host.aserve_predict(node, job.X_test)
    return {}


async def _server(node: Any, job: _Job, send: Report) -> dict[str, float]:
    from p2pboost.homo.estimators import HomoServer

    clients = sorted(job.peers)
    send("progress", f"training {job.params.n_estimators} trees with {', '.join(clients)}...")
    t0 = time.perf_counter()
    # One person plays every party here: nobody to collude with, so no two-client warning.
    server = await HomoServer(job.params, allow_two_clients=True).afit(node, clients)
    job.save(server.model_)
    return {"seconds": time.perf_counter() - t0}


async def _client(node: Any, job: _Job, send: Report) -> dict[str, float]:
    from p2pboost.homo.estimators import HomoClient

    estimator = HomoClient(job.params, identity=job.cert_dir, allow_two_clients=True)
    client = await estimator.afit(node, "server", job.X, job.y)
    job.save(client.model_)
    value = _auc(job.y_test, client.predict_proba(job.X_test))
    send("progress", f"test AUC {value:.4f} on {len(job.y_test)} rows (local prediction)")
    return {"auc": value}


def _auc(y: F64, proba: Any) -> float:
    p = np.asarray(proba, dtype=np.float64)
    return float(auc(y, p if p.ndim == 1 else p[:, -1]))


_ROLES: dict[str, Callable[[Any, _Job, Report], Awaitable[dict[str, float]]]]
_ROLES = {"guest": _guest, "host": _host, "server": _server, "client": _client}
