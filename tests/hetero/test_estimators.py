"""The user-facing facade, end to end over real TLS WebSockets on loopback."""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import Executor
from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import InputError, LocalProtocolError, NotFittedError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.estimators import HeteroGuest, HeteroHost
from p2pboost.hetero.model import joined_trees
from p2pboost.net.node import Node
from p2pboost.testing import TRAINING, MemoryFabric, WebSocketFabric, local_federation
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport
from tests.hetero.conftest import CONFIG, assert_same_trees


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["paillier", "ou"])
async def test_guest_and_host_over_mutual_tls(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, federation_certs: Path, scheme: str
) -> None:
    X, y = breast
    Xg, Xh = X[:, :12], X[:, 12:]
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    guest = HeteroGuest(params, config=CONFIG, scheme=scheme, executor=pool)
    assert guest.config is not None
    assert guest.config.scheme == scheme
    host = HeteroHost(executor=pool, workers=2)
    async with local_federation(WebSocketFabric(federation_certs), ["a", "b"], TRAINING) as c:
        await asyncio.gather(
            guest.afit(c["a"], ["b"], Xg, y, ids=np.arange(y.size)),
            host.afit(c["b"], "a", Xh, ids=np.arange(y.size)),
        )
        proba, _ = await asyncio.gather(
            guest.apredict(c["a"], Xg[:50]), host.aserve_predict(c["b"], Xh[:50])
        )
    core = train(params, X, y)
    assert_same_trees(joined_trees(guest.model_, [host.model_]), core)
    np.testing.assert_array_equal(proba, core.predict(X[:50]))
    # Each party's importances cover its own features only.
    assert guest.feature_importances_.shape == (12,)
    assert host.feature_importances_.shape == (18,)
    assert guest.feature_importances_.sum() == pytest.approx(1.0)


def test_facade_checks_its_inputs() -> None:
    with pytest.raises(NotFittedError):
        _ = HeteroGuest().model_
    with pytest.raises(NotFittedError):
        _ = HeteroHost().model_
    from p2pboost.hetero.config import HeteroConfig
    from p2pboost.hetero.estimators import _check_ids

    with pytest.raises(InputError, match="unknown encryption scheme 'rsa'"):
        HeteroGuest(scheme="rsa")
    with pytest.raises(InputError, match="unknown encryption scheme"):
        HeteroConfig(scheme="elgamal")

    with pytest.raises(InputError, match="unique"):
        _check_ids([1, 1, 2], 3)
    with pytest.raises(InputError, match="one per row"):
        _check_ids([1, 2], 3)


async def test_blocking_facade_refuses_to_run_inside_an_event_loop() -> None:
    node = Node("a", peers={"b": "mem://b"}, transport=MemoryTransport(MemoryNetwork(), "a"))
    with pytest.raises(LocalProtocolError, match="event loop"):
        HeteroGuest().fit(node, ["b"], np.zeros((4, 2)), np.zeros(4))
    with pytest.raises(LocalProtocolError, match="event loop"):
        HeteroHost().fit(node, "b", np.zeros((4, 2)))


async def test_blocking_fit_runs_its_own_node_and_loop(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, federation_certs: Path
) -> None:
    """A host trains with the blocking ``fit`` in its own thread; the guest with ``afit``."""
    X, y = breast
    Xg, Xh = X[:, :12], X[:, 12:]
    with socket.socket() as s:  # a free port for the host to listen on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"wss://127.0.0.1:{port}"
    host_node = Node(
        "b", listen=address, peers={"a": None}, tls=federation_certs / "b", config=TRAINING
    )
    guest_node = Node("a", peers={"b": address}, tls=federation_certs / "a", config=TRAINING)
    params = BoostParams(n_estimators=1, max_depth=2, max_bin=8)
    host = HeteroHost(executor=pool)
    hosting = asyncio.ensure_future(asyncio.to_thread(host.fit, host_node, "a", Xh))
    guest = HeteroGuest(params, config=CONFIG, executor=pool)
    async with guest_node:
        await guest.afit(guest_node, ["b"], Xg, y)
    assert await hosting is host
    assert_same_trees(joined_trees(guest.model_, [host.model_]), train(params, X, y))


@pytest.mark.slow
async def test_ids_align_the_parties_with_psi_before_training(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor
) -> None:
    """Each party holds a different, shuffled subset of the samples; with ``ids`` the facade
    runs PSI first and trains on the common rows, in the guest's order."""
    X, y = breast
    rng = np.random.default_rng(7)
    guest_rows = rng.permutation(y.size)[:420]
    host_rows = rng.permutation(y.size)[:450]
    common = [r for r in guest_rows.tolist() if r in set(host_rows.tolist())]
    ids = np.array([f"patient-{r}" for r in range(y.size)])
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    guest = HeteroGuest(params, config=CONFIG, executor=pool)
    host = HeteroHost(executor=pool, workers=2)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        a, b = c["a"], c["b"]
        await asyncio.gather(
            guest.afit(a, ["b"], X[guest_rows, :12], y[guest_rows], ids=ids[guest_rows]),
            host.afit(b, "a", X[host_rows, 12:], ids=ids[host_rows]),
        )
    assert guest.aligned_ids_.tolist() == ids[common].tolist()
    assert host.aligned_ids_.tolist() == ids[common].tolist()
    core = train(params, X[common], y[common])
    assert_same_trees(joined_trees(guest.model_, [host.model_]), core)


async def test_no_common_id_is_a_clear_error(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor
) -> None:
    X, y = breast
    guest = HeteroGuest(BoostParams(n_estimators=1), config=CONFIG, executor=pool)
    host = HeteroHost(executor=pool)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        a, b = c["a"], c["b"]
        results = await asyncio.gather(
            guest.afit(a, ["b"], X[:20, :12], y[:20], ids=np.arange(20)),
            host.afit(b, "a", X[:20, 12:], ids=np.arange(100, 120)),
            return_exceptions=True,
        )
    for result in results:
        assert isinstance(result, InputError), result
        assert "no sample id in common" in str(result)
