"""A whole federation in one process: try vertical or horizontal training without a network.

Before the partners set up certificates and machines, a data scientist wants to know what a
federation would learn from the data at hand. :func:`vertical` and :func:`horizontal` run
every party in this process, on one event loop, over the in-memory transport of
:mod:`p2pboost.testing`: the protocols, the wire codec, the encryption (Paillier or
Okamoto-Uchiyama) and the secure aggregation are the real ones, so the models are those a
deployment grows (vertical: the plaintext core's trees on the joined columns) and the time is
what the cryptography costs on this machine; only the bytes travel in memory, and every party
shares this machine's cores. Each returns every party's model as its own file would hold it.

::

    from p2pboost import simulate

    fed = simulate.vertical((X_guest, y), [X_host], BoostParams(n_estimators=10))
    scores = fed.predict(X_guest_test, [X_host_test])

Keys default to 2048 bits, as real parties use; a simulation on public or synthetic data may
pass ``key_bits=1024`` (with ``allow_insecure_key=True``) for speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost import certs
from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.inference.batch import guest_predict, host_predict
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.homo.client import client_train
from p2pboost.homo.config import ClientIdentity, HomoConfig
from p2pboost.homo.server import server_train
from p2pboost.testing import MemoryFabric, local_federation

__all__ = ["VerticalFederation", "horizontal", "vertical"]

F64 = npt.NDArray[np.float64]
GUEST = "guest"


@dataclass(frozen=True, eq=False)
class VerticalFederation:
    """Every party's part of a vertical model, as each party's file would hold it."""

    guest: GuestModel
    hosts: list[HostModel]

    def predict(self, X_guest: Any, X_hosts: Sequence[Any]) -> F64:
        """Predictions for aligned rows through the one-round prediction protocol (in
        this process, as :func:`vertical` trains)."""
        return asyncio.run(self._predict(X_guest, X_hosts))

    async def _predict(self, X_guest: Any, X_hosts: Sequence[Any]) -> F64:
        if len(X_hosts) != len(self.hosts):
            raise InputError(f"give the rows of each of the {len(self.hosts)} hosts")
        rows = [  # each host's rows checked once, here (a scipy.sparse matrix stays sparse)
            Features.from_user(X, order=m.feature_names, n_features=m.n_features, sparse=True)
            for X, m in zip(X_hosts, self.hosts, strict=True)
        ]
        names = list(self.guest.hosts)
        async with local_federation(MemoryFabric(), [GUEST, *names]) as fed:

            async def guest() -> F64:
                async with fed[GUEST].session("predict", peers=names) as s:
                    return await guest_predict(s, self.guest, X_guest)

            async def host(name: str, model: HostModel, X: Features) -> None:
                async with fed[name].session("predict", peers=[GUEST]) as s:
                    await host_predict(s, model, X)

            margin, *_ = await asyncio.gather(
                guest(),
                *(host(n, m, X) for n, m, X in zip(names, self.hosts, rows, strict=True)),
            )
        return self.guest.transform(np.asarray(margin))


def vertical(
    guest: tuple[Any, Any],
    hosts: Sequence[Any],
    params: BoostParams | None = None,
    *,
    key_bits: int = 2048,
    allow_insecure_key: bool = False,
    scheme: str = "paillier",
    eval_set: tuple[tuple[Any, Any], Sequence[Any]] | None = None,
    workers: int | None = None,
) -> VerticalFederation:
    """Vertical SecureBoost: the guest's ``(X, y)`` and each host's ``X``, the same rows in the
    same order (align by id first). ``eval_set``: ``((X_guest, y), [X_host, ...])``."""
    if not hosts:
        raise InputError("give at least one host's features")
    params = params or BoostParams()
    config = HeteroConfig(
        key_bits=key_bits, allow_insecure_key=allow_insecure_key, scheme=scheme, workers=workers
    )
    names = [f"host{k}" for k in range(1, len(hosts) + 1)]
    # Each host's features checked once, here (a scipy.sparse matrix stays sparse).
    features = [Features.from_user(X, sparse=True) for X in hosts]

    async def run() -> VerticalFederation:
        async with local_federation(MemoryFabric(), [GUEST, *names]) as fed:

            async def train_guest() -> GuestModel:
                async with fed[GUEST].session("train", peers=names) as s:
                    return await guest_train(
                        s,
                        names,
                        guest[0],
                        guest[1],
                        params,
                        eval_sets=[eval_set[0]] if eval_set else (),
                        config=config,
                    )

            async def train_host(k: int, X: Features) -> HostModel:
                async with fed[names[k]].session("train", peers=[GUEST]) as s:
                    evals = [eval_set[1][k]] if eval_set else ()
                    return await host_train(s, GUEST, X, eval_sets=evals, workers=workers)

            g, *h = await asyncio.gather(
                train_guest(), *(train_host(k, X) for k, X in enumerate(features))
            )
        assert isinstance(g, GuestModel)
        return VerticalFederation(g, [m for m in h if isinstance(m, HostModel)])

    return asyncio.run(run())


def horizontal(
    clients: Sequence[tuple[Any, Any]],
    params: BoostParams | None = None,
    *,
    eval_sets: Sequence[tuple[Any, Any] | None] | None = None,
    early_stopping_rounds: int | None = None,
) -> Booster:
    """Horizontal SecureBoost: each client's ``(X, y)`` (the same columns), a server that
    sees only securely aggregated sums; the federation's model (every party holds it)."""
    if len(clients) < 2:
        raise InputError("a horizontal federation needs at least two clients")
    names = [f"client{k}" for k in range(1, len(clients) + 1)]
    config = HomoConfig(  # one process plays every party: nobody to collude with
        params=params or BoostParams(),
        allow_two_clients=True,
        min_clients=len(clients),
        early_stopping_rounds=early_stopping_rounds,
    )
    evals = list(eval_sets) if eval_sets is not None else [None] * len(clients)

    async def run(ids: Path) -> Booster:
        async with local_federation(MemoryFabric(), ["server", *names]) as fed:

            async def server() -> Booster:
                async with contextlib.AsyncExitStack() as stack:
                    sessions = {
                        c: await stack.enter_async_context(
                            fed["server"].session(f"homo/{c}", peers=[c])
                        )
                        for c in names
                    }
                    return (await server_train(sessions, config)).booster

            async def client(name: str, data: tuple[Any, Any], ev: Any) -> Booster:
                async with fed[name].session(f"homo/{name}", peers=["server"]) as s:
                    return await client_train(
                        s,
                        "server",
                        data[0],
                        data[1],
                        config,
                        identity=ClientIdentity.from_dir(ids / name),
                        me=name,
                        eval_set=ev,
                    )

            model, *_ = await asyncio.gather(
                server(),
                *(client(n, d, e) for n, d, e in zip(names, clients, evals, strict=True)),
            )
        return model

    # Clients sign their key adverts: certificates of a throw-away CA, for this run only.
    with tempfile.TemporaryDirectory(prefix="p2pboost-simulate-") as tmp:
        certs.init(Path(tmp), names)
        return asyncio.run(run(Path(tmp)))
