"""What crosses the wire while serving: the host receives ids only, never the guest's
features or scores; the guest receives decision bits only, never a host value or threshold.

Every message each party receives is captured below the node (raw transport messages) and
searched for the float64 encodings (both byte orders) of the secrets, as in the training wire
test; a planted secret proves the search would find one.
"""

from __future__ import annotations

import asyncio

import numpy as np

from p2pboost.audit.views import TapFabric
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.testing import local_federation
from tests.hetero.test_wire import _blob, _found, _singles
from tests.serving.conftest import HOST_COLS, Trained
from tests.serving.test_serving import CONFIG


async def test_serving_sends_no_secret(trained: Trained) -> None:
    rows = np.arange(0, 200)
    fabric = TapFabric()
    async with local_federation(fabric, ["a", "b", "c"], CONFIG) as c:
        hosts = [
            asyncio.create_task(serve_host(c[h], trained.host(h), trained.store(h)))
            for h in trained.guest.hosts
        ]
        async with GuestPredictor(c["a"], trained.guest, max_batch=32) as p:
            batch = await p.predict_batch(trained.ids[rows], trained.guest_X(rows))
            online = await asyncio.gather(
                *(p.predict(int(trained.ids[r]), trained.guest_X(r)) for r in rows[:64])
            )
        for t in hosts:
            t.cancel()
        await asyncio.gather(*hosts, return_exceptions=True)
    guest_secrets = list(_singles(trained.guest_X(rows))) + list(
        _singles(np.concatenate([batch, np.array(online)]))
    )
    host_secrets = {
        h: list(_singles(trained.X[rows][:, HOST_COLS[h]]))
        + list(_singles(np.array([s.threshold for s in trained.host(h).splits], dtype=np.float64)))
        for h in trained.guest.hosts
    }
    assert len(guest_secrets) > 1000
    for h in trained.guest.hosts:
        blob = _blob(fabric, h)
        assert blob  # the host did receive the queries
        assert _found(blob, guest_secrets) == [], f"guest data reached host {h}"
        assert len(host_secrets[h]) > 100
        assert _found(_blob(fabric, "a"), host_secrets[h]) == [], h
    # The search is not blind: a secret planted in a host's received bytes is found.
    planted = _blob(fabric, "b") + guest_secrets[7]
    assert _found(planted, guest_secrets) == [guest_secrets[7]]
