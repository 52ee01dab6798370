"""Vertical training under Okamoto-Uchiyama, over real mutual-TLS WebSockets on loopback.

OU changes the arithmetic (ciphertexts modulo ``n = p**2 q``, plaintexts below ``p``) and the
packing budget (681 bits at 2048 instead of 2047), not the trees: training stays lossless. And
because OU is not CCA-secure, the guest must refuse, naming the host, any split-info whose
decryption falls outside the layout of its own packing: here a host plants the encryption of a
value above ``p`` (the first step of the attack that learns ``p`` from decryptions).
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any

import gmpy2  # type: ignore[import-untyped]
import numpy as np
import pytest

from p2pboost.crypto.ou import OUPublicKey
from p2pboost.crypto.paillier import CiphertextBatch
from p2pboost.exceptions import RemoteProtocolError, SessionClosed
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero._messages import Package
from p2pboost.hetero.training import host_tree as _host
from p2pboost.testing import TRAINING, WebSocketFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees, federate, predict

#: Whole federations over real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

OU_CONFIG = replace(CONFIG, scheme="ou")


async def test_ou_training_grows_the_core_trees_over_mtls(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    ou_keys: Keys,
    federation_certs: Path,
) -> None:
    X, y = breast
    Xg, Xh = X[:, :10], X[:, 10:]
    params = BoostParams(n_estimators=3, max_depth=4, max_bin=16)
    async with local_federation(WebSocketFabric(federation_certs), ["a", "b"], TRAINING) as c:
        fed = await federate(c, Xg, y, [Xh], params, pool, ou_keys, config=OU_CONFIG)
        margin = await predict(c, fed, Xg, [Xh])
    core = train(params, X, y)
    assert_same_trees(fed.joined(), core)
    assert any((t.owner == 1).any() for t in fed.guest.trees)  # the host won splits
    np.testing.assert_array_equal(margin, core.predict_margin(X))


async def test_guest_aborts_naming_the_host_that_plants_a_value_above_p(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    ou_keys: Keys,
    federation_certs: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = breast
    public_key = ou_keys[0]
    assert isinstance(public_key, OUPublicKey)
    n = public_key.n
    # What a cheating host can make with the public key alone: E(n - 12345), a value >= p.
    planted = gmpy2.powmod(public_key.g, n - 12345, n) * gmpy2.powmod(public_key.h, 7, n) % n
    honest_send = _host.send  # type: ignore[attr-defined]

    async def cheating_send(channel: Any, msg: Any) -> None:
        if isinstance(msg, Package) and len(msg.ciphertexts):
            width = public_key.ciphertext_bytes
            data = planted.to_bytes(width, "big") + msg.ciphertexts.data[width:]
            msg = replace(msg, ciphertexts=CiphertextBatch.of(public_key, data))
        await honest_send(channel, msg)

    monkeypatch.setattr(_host, "send", cheating_send)
    params = BoostParams(n_estimators=1, max_depth=2, max_bin=16)
    async with local_federation(WebSocketFabric(federation_certs), ["a", "b"], TRAINING) as c:
        with pytest.raises((RemoteProtocolError, SessionClosed)) as caught:
            await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, ou_keys, config=OU_CONFIG)
    # The guest's own error names the host and the cause (a host sees the abort as well).
    errors = [caught.value, *getattr(caught.value, "exceptions", [])]
    assert any(
        isinstance(e, RemoteProtocolError) and "b: split-info sums do not decode" in str(e)
        for e in errors
    ), errors
