"""Stage 1 of ``python -m benchmarks inference``: training the model files it serves, each
party in its own process over TLS 1.3 WebSockets on loopback (the hosts listen, the guest
dials). Its own module because training is a different concept from the serving stage the
benchmark measures: this stage only has to produce ``guest.json`` and ``hostK.json``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from benchmarks.hetero import GUEST, PARTY_TIMEOUT
from p2pboost.app._local import LocalParties, Report
from p2pboost.certs import TLSConfig
from p2pboost.gbdt.params import BoostParams
from p2pboost.net.node import Node

if TYPE_CHECKING:
    from benchmarks.inference import Vertical

__all__ = ["host_node", "train_models"]

F64 = npt.NDArray[np.float64]


def host_node(fed: str, name: str) -> Node:
    """A host's node: listens on a free loopback port; the guest (first id) dials it."""
    return Node(
        name,
        listen="wss://127.0.0.1:0",
        peers={GUEST: None},
        tls=TLSConfig.from_dir(Path(fed) / name),
    )


async def _train_host(
    report: Report, fed: str, name: str, X: F64, workers: int, out: str
) -> dict[str, Any]:
    from p2pboost.hetero.estimators import HeteroHost
    from p2pboost.workers import process_pool

    with process_pool(workers) as pool:
        async with host_node(fed, name) as node:
            report("address", node.address)
            host = await HeteroHost(executor=pool, workers=workers).afit(node, GUEST, X)
    host.save(Path(out) / f"{name}.json")
    return {}


async def _train_guest(
    report: Report,
    fed: str,
    addresses: dict[str, str],
    X: F64,
    y: F64,
    params: dict[str, Any],
    key_bits: int,
    workers: int,
    out: str,
) -> dict[str, Any]:
    from p2pboost.hetero.config import HeteroConfig
    from p2pboost.hetero.estimators import HeteroGuest
    from p2pboost.workers import process_pool

    config = HeteroConfig(key_bits=key_bits, allow_insecure_key=key_bits < 2048)
    with process_pool(workers) as pool:
        async with Node(GUEST, peers=addresses, tls=TLSConfig.from_dir(Path(fed) / GUEST)) as node:
            t0 = time.perf_counter()
            guest = await HeteroGuest(
                BoostParams.from_dict(params), config=config, executor=pool
            ).afit(node, sorted(addresses), X, y)
            seconds = time.perf_counter() - t0
    guest.save(Path(out) / "guest.json")
    return {"seconds": seconds}


def train_models(
    fed: Path,
    data: Vertical,
    blocks: Sequence[npt.NDArray[np.int64]],
    params: BoostParams,
    *,
    key_bits: int,
    workers: int,
    out: Path,
) -> float:
    """Train on every row, guest and hosts in their own processes; files land in ``out``.

    Returns the guest's training wall time (key generation included).
    """
    names = [f"host{k}" for k in range(1, len(blocks) + 1)]
    with LocalParties("benchmark", timeout=PARTY_TIMEOUT, tracebacks=True) as parties:
        for name, block in zip(names, blocks, strict=True):
            parties.start(
                name,
                _train_host,
                fed=str(fed),
                name=name,
                X=data.host[:, block],
                workers=workers,
                out=str(out),
            )
        addresses = {name: parties.expect(name, "address") for name in names}
        parties.start(
            GUEST,
            _train_guest,
            fed=str(fed),
            addresses=addresses,
            X=data.guest,
            y=data.y,
            params=params.to_dict(),
            key_bits=key_bits,
            workers=workers,
            out=str(out),
        )
        seconds: float = parties.wait()[GUEST]["seconds"]
    return seconds
