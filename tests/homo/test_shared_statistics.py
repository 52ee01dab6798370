"""The trees the server sends to clients carry no per-node statistics unless configured.

Covers (hessian sums) and gains with the split values help a client reconstruct another
client's records (TimberStrike, arXiv 2506.07605), and prediction needs neither: clients
receive zeros in their place (and predict exactly what the server's model predicts) unless
the server shares them (``share_statistics=True``); the server's own model keeps them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import run_homo

PARAMS = BoostParams(n_estimators=2, max_depth=3, max_bin=16)


async def test_clients_receive_trees_without_covers_and_gains_unless_shared(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    parts = {"c1": breast[0], "c2": breast[1]}
    X = np.vstack([p[0] for p in parts.values()])
    for share in (False, True):
        config = HomoConfig(
            params=PARAMS, round_timeout=20, allow_two_clients=True, share_statistics=share
        )
        run = await run_homo(parts, config, federation)
        assert isinstance(run.result, HomoResult), run.result
        server = run.result.booster
        assert all(t.cover.any() and t.gain.any() for t in server.trees)  # the server's own
        for model in run.models.values():
            assert isinstance(model, Booster), model
            np.testing.assert_array_equal(model.predict(X), server.predict(X))
            for ours, theirs in zip(model.trees, server.trees, strict=True):
                np.testing.assert_array_equal(ours.value, theirs.value)
                if share:
                    np.testing.assert_array_equal(ours.cover, theirs.cover)
                    np.testing.assert_array_equal(ours.gain, theirs.gain)
                else:
                    assert not ours.cover.any()
                    assert not ours.gain.any()
