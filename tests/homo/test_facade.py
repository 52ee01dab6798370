"""The facade over real TLS 1.3 WebSockets with mutual authentication; local prediction."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from p2pboost.certs import TLSConfig
from p2pboost.exceptions import NotFittedError, RemoteProtocolError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.estimators import HomoClient, HomoServer
from p2pboost.net.node import Node
from tests.homo.conftest import SERVER, TRAINING, bundled, same_trees


async def _federation(
    federation: Path,
    parts: dict[str, tuple[np.ndarray, np.ndarray]],
    params: BoostParams,
    server_masking: bool = True,
) -> tuple[HomoServer | BaseException, dict[str, HomoClient | BaseException]]:
    clients = list(parts)
    async with Node(
        SERVER,
        listen="wss://127.0.0.1:0",
        peers=dict.fromkeys(clients),
        tls=TLSConfig.from_dir(federation / SERVER),
        config=TRAINING,
    ) as server_node:

        async def client(c: str) -> HomoClient:
            async with Node(
                c,
                peers={SERVER: server_node.address},
                tls=TLSConfig.from_dir(federation / c),
                config=TRAINING,
            ) as node:
                est = HomoClient(
                    params, identity=federation / c, round_timeout=20, allow_two_clients=True
                )
                return await est.afit(node, SERVER, *parts[c])

        server = HomoServer(
            params, masking=server_masking, round_timeout=20, allow_two_clients=True
        )
        async with asyncio.timeout(60):
            first, *rest = await asyncio.gather(
                server.afit(server_node, clients),
                *(client(c) for c in clients),
                return_exceptions=True,
            )
    results = cast(list[HomoClient | BaseException], rest)
    return cast(HomoServer | BaseException, first), dict(zip(clients, results, strict=True))


async def test_fit_over_mutual_tls_and_predict_locally(federation: Path) -> None:
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16)
    parts, (Xt, _) = bundled("breast")
    server, clients = await _federation(federation, parts, params)
    assert isinstance(server, HomoServer), server
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    core = train(params, X, y)
    assert same_trees(server.model_, core)
    for est in clients.values():
        assert isinstance(est, HomoClient), est
        np.testing.assert_array_equal(est.predict_proba(Xt), core.predict(Xt))
        np.testing.assert_array_equal(est.predict(Xt), (core.predict(Xt) >= 0.5).astype(float))


async def test_unmasked_mode_needs_every_party_to_opt_in(federation: Path) -> None:
    params = BoostParams(n_estimators=1, max_depth=2, max_bin=8)
    parts, _ = bundled("breast")
    _, clients = await _federation(federation, parts, params, server_masking=False)
    for err in clients.values():
        assert isinstance(err, RemoteProtocolError), err
        assert err.peer == SERVER
        assert "settings differ" in str(err)
        assert "masking false at the server, true here" in str(err)  # names what differs


def test_predict_before_fit_raises() -> None:
    with pytest.raises(NotFittedError):
        HomoClient().predict(np.zeros((1, 3)))
