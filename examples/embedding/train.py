"""Prepare everything the serving examples need, in one directory, on this machine.

* ``guest.csv`` (id, label ``y``, 10 features) and ``host.csv`` (id, 20 features): scikit-learn's
  bundled breast-cancer data split by columns between two organisations, one row per customer
  id (569 rows).
* ``certs/``: a throw-away federation CA with certificates for ``guest``, ``host`` and ``app``
  (the application that will ask the guest for scores).
* ``guest-model.json`` and ``host-model.json``: a small hetero SecureBoost model trained over
  WebSockets with mutual TLS on 127.0.0.1 on the first 400 ids (Paillier keys of 1024 bits by
  explicit opt-in, to keep the example quick; real deployments keep the 2048-bit default).
* ``scores.csv``: every id's score from one federated batch prediction, the reference the
  online examples are checked against.
* ``guest.toml`` and ``host.toml``: the two parties' configs for ``p2pboost serve``.

This script plays both parties in one process to stay short; across organisations each runs
its half on its own machine (see ``examples/two-laptops`` and ``p2pboost party``).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer

from p2pboost import certs
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.estimators import HeteroGuest, HeteroHost
from p2pboost.net.node import Node

GUEST_FEATURES = 10
TRAIN_ROWS = 400
FIRST_ID = 100_000


def write_csv(path: Path, header: list[str], columns: list[np.ndarray]) -> None:
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(zip(*(c.tolist() for c in columns), strict=True))


def prepare_data(out: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split the bundled data by columns; return ids, guest X, labels, host X."""
    X, y = load_breast_cancer(return_X_y=True)
    ids = FIRST_ID + np.arange(X.shape[0])
    guest_X, host_X = X[:, :GUEST_FEATURES], X[:, GUEST_FEATURES:]
    guest_names = [f"g{j}" for j in range(guest_X.shape[1])]
    host_names = [f"h{j}" for j in range(host_X.shape[1])]
    write_csv(out / "guest.csv", ["id", "y", *guest_names], [ids, y, *guest_X.T])
    write_csv(out / "host.csv", ["id", *host_names], [ids, *host_X.T])
    return ids, guest_X, y.astype(np.float64), host_X


async def train(out: Path, trees: int) -> np.ndarray:
    """Train guest and host over loopback mTLS; save both models; score every row once."""
    ids, guest_X, y, host_X = prepare_data(out)
    train_rows = slice(0, TRAIN_ROWS)
    params = BoostParams(n_estimators=trees, max_depth=3, learning_rate=0.3, max_bin=32)
    config = HeteroConfig(key_bits=1024, allow_insecure_key=True, workers=1)
    host_node = Node(
        "host", listen="wss://127.0.0.1:0", peers={"guest": None}, tls=out / "certs" / "host"
    )
    async with host_node:
        guest_node = Node("guest", peers={"host": host_node.address}, tls=out / "certs" / "guest")
        async with guest_node:
            guest, host = await asyncio.gather(
                HeteroGuest(params, config=config).afit(
                    guest_node, ["host"], guest_X[train_rows], y[train_rows]
                ),
                HeteroHost(workers=1).afit(host_node, "guest", host_X[train_rows]),
            )
            scores, _ = await asyncio.gather(
                guest.apredict(guest_node, guest_X), host.aserve_predict(host_node, host_X)
            )
    guest.save(out / "guest-model.json")
    host.save(out / "host-model.json")
    write_csv(out / "scores.csv", ["id", "score"], [ids, np.asarray(scores)])
    return np.asarray(scores)


GUEST_TOML = """\
id = "guest"
role = "guest"
task = "serve"
certs = "certs/guest"

[peers]
host = "wss://127.0.0.1:{host_port}"

[data]
path = "guest.csv"
id_column = "id"
label_column = "y"

[train]
model = "guest-model.json"

[serve]
listen = "127.0.0.1:{serve_port}"
"""

HOST_TOML = """\
id = "host"
role = "host"
task = "serve"
listen = "127.0.0.1:{host_port}"
certs = "certs/host"

[peers]
guest = ""

[data]
path = "host.csv"
id_column = "id"

[train]
model = "host-model.json"
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("work"), help="Directory to fill.")
    parser.add_argument("--trees", type=int, default=10, help="Boosting rounds.")
    parser.add_argument("--host-port", type=int, default=8444, help="Host's port in host.toml.")
    parser.add_argument("--serve-port", type=int, default=8765, help="Guest endpoint's port.")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if (out / "certs" / "ca").exists():  # run again: keep the federation's keys
        print(f"reusing the certificates in {out / 'certs'}")
    else:
        certs.init(out / "certs", ["guest", "host", "app"])
    scores = asyncio.run(train(out, args.trees))
    ports = {"host_port": args.host_port, "serve_port": args.serve_port}
    (out / "guest.toml").write_text(GUEST_TOML.format(**ports))
    (out / "host.toml").write_text(HOST_TOML.format(**ports))
    _, y = load_breast_cancer(return_X_y=True)
    held_out = slice(TRAIN_ROWS, None)
    accuracy = float(np.mean((scores[held_out] > 0.5) == y[held_out]))
    print(f"trained {args.trees} trees; held-out accuracy {accuracy:.3f}; wrote {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
